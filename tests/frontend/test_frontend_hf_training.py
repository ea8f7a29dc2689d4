"""Hugging Face training steps (small configs, train mode, `labels=`) under backend="eager":
one graph, zero graph breaks (logger.warning_once is replayed, the loss module built in the
forward is traced), loss and every parameter's gradient equal to eager."""

import contextlib
import logging

import pytest
import torch
from test_frontend_hf import bert, gpt2, t5, vit

import kiln
from kiln.frontend.replayed_callers import plain_handler

T = pytest.importorskip("transformers")


@contextlib.contextmanager
def logging_as_outside_pytest():
    """pytest's log capture handlers (added for each test's call) keep records in lists a frame
    could read, so a logging call reaching them runs in Python (a break); outside pytest,
    transformers' loggers reach only its own StreamHandler, and warning_once is replayed."""
    removed = []
    for logger in (logging.getLogger("transformers"), logging.getLogger()):
        for handler in list(logger.handlers):
            if not plain_handler(handler):
                logger.removeHandler(handler)
                removed.append((logger, handler))
    try:
        yield
    finally:
        for logger, handler in removed:
            logger.addHandler(handler)


def labelled(make):
    """The model with a loss head and its labels."""
    model, inputs = make()
    if make is bert:
        model = T.BertForMaskedLM(model.config)
        labels = inputs["input_ids"]
    elif make is vit:
        model = T.ViTForImageClassification(
            T.ViTConfig(**{**model.config.to_dict(), "num_labels": 3})
        )
        labels = torch.tensor([0, 2])
    elif make is t5:
        labels = torch.randint(0, 128, (2, 6), generator=torch.Generator().manual_seed(3))
    else:
        labels = inputs["input_ids"]
    return model, {**inputs, "labels": labels}


# (BERT's head builds CrossEntropyLoss() as T5's does; LLaMA and ViT had no break before.)
@pytest.mark.parametrize("make", [gpt2, t5], ids=lambda f: f.__name__)
def test_hf_training_step_no_breaks(make):
    torch.manual_seed(0)
    model, inputs = labelled(make)
    model.train()
    torch.manual_seed(1)
    expected = model(**inputs).loss
    expected.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    kiln.reset()
    compiled = kiln.compile(model, backend="eager")
    torch.manual_seed(1)
    with logging_as_outside_pytest():
        got = compiled(**inputs).loss
    got.backward()
    torch.testing.assert_close(got, expected)
    for n, p in model.named_parameters():
        if n in grads:
            torch.testing.assert_close(p.grad, grads[n], msg=n)
        else:
            assert p.grad is None, n
    assert kiln.counters["stats"]["graph_breaks"] == 0, dict(kiln.counters["graph_break"])
    assert kiln.counters["stats"]["unique_graphs"] == 1


def test_hf_gradient_checkpointing_training_step_no_breaks():
    """Layers call functools.partial(checkpoint, use_reentrant=False); the embeddings' forward
    hook calls output.requires_grad_(True) (Note [Checkpoint: traced as a plain call])."""
    torch.manual_seed(0)
    model, inputs = labelled(gpt2)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    torch.manual_seed(1)
    expected = model(**inputs).loss
    expected.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    kiln.reset()
    torch.manual_seed(1)
    with logging_as_outside_pytest():
        got = kiln.compile(model, backend="eager")(**inputs).loss
    got.backward()
    torch.testing.assert_close(got, expected)
    for n, p in model.named_parameters():
        torch.testing.assert_close(p.grad, grads[n], msg=n)
    assert kiln.counters["stats"]["graph_breaks"] == 0, dict(kiln.counters["graph_break"])
    assert kiln.counters["stats"]["unique_graphs"] == 1
