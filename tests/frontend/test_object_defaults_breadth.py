"""What `object` gives user objects in compiled code (default str()/repr(), type(obj).__dict__):
each case compares kiln with eager Python."""

import pytest
import torch
from frontend_helpers import CountingBackend, run_and_compare

import kiln


class _Plain:
    pass


class _Attrs:
    limit = 4

    def __init__(self):
        self.own = 6


def _text_of_new_object(x):
    obj = _Plain()
    return x + 1, str(obj), obj, repr(obj)


def test_default_str_and_repr_of_an_object_made_in_the_frame():
    kiln.reset()
    backend = CountingBackend()
    fn = kiln.compile(_text_of_new_object, backend=backend, fullgraph=True)
    for _ in range(2):
        out, text, obj, rep = fn(torch.ones(2))
        # the text names the very object the frame returns, as eager's does
        assert text == repr(obj) == rep == object.__repr__(obj)
        assert text.startswith(f"<{__name__}._Plain object at 0x")
    assert backend.calls == 1


def _text_of_input(x, obj):
    return x * 2, str(obj)


def test_default_str_of_an_input_object_is_its_own():
    kiln.reset()
    fn = kiln.compile(_text_of_input, backend="eager", fullgraph=True)
    for obj in (_Plain(), _Plain()):
        assert fn(torch.ones(2), obj)[1] == repr(obj)


def _text_used_in_trace(x):
    return x + len(str(_Plain()))


def test_default_text_used_while_tracing_breaks():
    kiln.reset()
    with pytest.raises(kiln.exc.Unsupported):
        kiln.compile(_text_used_in_trace, backend="eager", fullgraph=True)(torch.ones(2))


def _reads_class_dict(x, obj):
    if "limit" in type(obj).__dict__:
        return x + type(obj).__dict__["limit"]
    return x - 1


def test_type_of_input_object_dict_read():
    run_and_compare(_reads_class_dict, torch.ones(3), _Attrs(), fullgraph=True)


def _class_dict_of_new_object(x):
    obj = _Attrs()
    return x + len(type(obj).__dict__) * 0 + ("own" in type(obj).__dict__)


def test_type_of_new_object_dict_read():
    run_and_compare(_class_dict_of_new_object, torch.ones(3), fullgraph=True)


class _Changing:
    pass


def test_type_dict_guarded_against_class_changes():
    kiln.reset()
    obj = _Changing()
    fn = kiln.compile(_reads_class_dict, backend="eager", fullgraph=True)
    x = torch.ones(2)
    assert torch.equal(fn(x, obj), x - 1)
    _Changing.limit = 5
    try:
        assert torch.equal(fn(x, obj), x + 5)
        _Changing.limit = 7
        assert torch.equal(fn(x, obj), x + 7)
    finally:
        del _Changing.limit
    assert torch.equal(fn(x, obj), x - 1)
