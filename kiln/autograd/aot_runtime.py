"""The AOT runtime: the autograd.Function that runs a compiled forward/backward pair, and the
epilogue that writes mutated inputs back and rebuilds the user's outputs (split from aot.py)."""

import torch

from kiln.contracts import output_layouts


class CompiledFunction(torch.autograd.Function):
    """Base of the per-graph autograd.Functions (backward node: CompiledFunctionBackward)."""


class _NoDoubleBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, g, *_):
        return g.clone()

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(
            "kiln: double backward through a compiled region is not supported (its backward was "
            "compiled ahead of time and is not differentiable); run this part eagerly"
        )


def _make_function(plan):
    num_fw = len(plan.mutated_inputs) + sum(1 for k, _ in plan.outputs if k == "graph")
    non_diff = [i for i in range(num_fw) if i not in set(plan.diff_outputs)]

    mutated_storages = plan.mutated_inputs

    num_tensors = plan.num_saved - plan.num_saved_sizes
    check_saved = _saved_to_check(plan, num_fw, num_tensors)

    def forward(ctx, *args):
        args = args[: plan.num_inputs]  # the rest: lifted tensors (constants in the graph)
        outs = plan.forward(*args)
        fw_outs = [_plain(o) for o in outs[:num_fw]]
        saved = list(outs[num_fw : num_fw + num_tensors])
        if check_saved:  # the epilogue will overwrite these inputs: keep the old values
            ptrs = {_storage(args[i]) for i in mutated_storages}
            for j in check_saved:
                if _storage(saved[j]) in ptrs:
                    saved[j] = saved[j].clone()
        ctx.save_for_backward(*saved)
        # Note [Partitioner: saved sizes]: sizes saved for the backward are ints on the ctx
        ctx.kiln_sizes = tuple(outs[num_fw + num_tensors : num_fw + plan.num_saved])
        ctx.kiln_shapes = [fw_outs[i].shape for i in plan.diff_outputs]
        ctx.mark_non_differentiable(
            *[fw_outs[i] for i in non_diff if isinstance(fw_outs[i], torch.Tensor)]
        )
        ctx.set_materialize_grads(False)
        return tuple(fw_outs)

    def backward(ctx, *grads):
        saved = (*ctx.saved_tensors, *ctx.kiln_sizes)
        tangents, present = plan.tangents_from(grads, ctx.kiln_shapes)
        double = torch.is_grad_enabled()
        with torch.no_grad():
            got = list(plan.backward(*saved, *tangents))
        result = [None] * (plan.num_inputs + len(plan.lifted))
        for i, g in plan.input_grads(got, present, ctx.needs_input_grad):
            if double:  # create_graph=True: differentiating this grad raises a clear error
                g = _NoDoubleBackward.apply(g, torch.empty(0, requires_grad=True))
            result[i] = g
        return tuple(result)

    # compiled autograd finds the plan (backward graph, saved/tangent layout) as `_kiln_plan`
    return type(
        "CompiledFunction",
        (CompiledFunction,),
        {"forward": staticmethod(forward), "backward": staticmethod(backward), "_kiln_plan": plan},
    )


# Note [AOT: outputs are not views]
# A graph output is often a view of a buffer made inside the graph (the logits reshaped from an mm's
# 2-d result). Returned from the autograd.Function as a view, an in-place op on it would raise
# ("Output 0 of CompiledFunction is a view and is being modified inplace"), where eager allows it:
# such an output is handed over as a plain tensor on the same memory: `detach()` makes one that
# keeps the view's conjugate and negative bits (a `set_` onto the storage dropped them: the
# conjugated result of `fft.ifft` came back unconjugated).
def _plain(o):
    if isinstance(o, torch.Tensor) and o._base is not None:
        return o.detach()
    return o


def _saved_to_check(plan, num_fw, num_tensors):
    """Positions of saved tensors that may share memory with a mutated input.

    The compiler may say where each output's memory comes from (`OutputLayouts.sources` of a kiln
    CompiledGraph: "fresh", ("input", k) or None): a fresh buffer, or an input that is not
    mutated (inputs sharing memory with a mutated one run eagerly), needs no check per call.
    """
    if not plan.mutated_inputs:
        return []
    sources = output_layouts(plan.forward).sources
    mutated = set(plan.mutated_inputs)
    check = []
    for j in range(num_tensors):
        k = num_fw + j
        src = sources[k] if sources is not None and k < len(sources) else None
        if src == "fresh" or (isinstance(src, (list, tuple)) and src[1] not in mutated):
            continue
        check.append(j)
    return check


def _storage(t):
    return t.untyped_storage().data_ptr() if isinstance(t, torch.Tensor) and t.numel() else None


def _mutated_inputs_alias(args, mutated):
    """Whether a mutated input shares memory with another input (the trace assumed not)."""
    ptrs = [_storage(a) for a in args]
    for i in mutated:
        if ptrs[i] is not None and sum(1 for p in ptrs if p == ptrs[i]) > 1:
            return True
    return False


def _finish(plan, args, graph_outs):
    """Epilogue: copy mutated inputs, rebuild the user's outputs (aliases regenerated as views)."""
    nm = len(plan.mutated_inputs)
    written = []
    for i, v in zip(plan.mutated_inputs, graph_outs[:nm]):
        a = args[i]
        if v.data_ptr() == a.data_ptr() and v.stride() == a.stride() and not v.requires_grad:
            written.append(a)  # written in place by the compiled graph (same memory, same layout)
            continue
        if v.requires_grad and not (a.is_leaf and a.requires_grad):
            # Note [AOT: mutated inputs that require grad] (a leaf that requires grad can only
            # have been written under no_grad, as an optimizer writes its parameters)
            with torch.enable_grad():
                args[i].copy_(v)
        else:
            with torch.no_grad():
                args[i].copy_(v)
    if written:  # what eager's in-place ops do: autograd sees the tensors as modified
        torch.autograd.graph.increment_version(written)
    for (owner, name), v in zip(plan.mutated_constants, graph_outs[nm:]):
        with torch.no_grad():  # a tensor the graph closed over (not an input), written in place
            getattr(owner, name).copy_(v)
    nm += len(plan.mutated_constants)
    rest = graph_outs[nm:]
    result = [None] * len(plan.outputs)
    for j, (kind, v) in enumerate(plan.outputs):
        if kind == "graph":
            result[j] = rest[v]
        elif kind == "const":
            result[j] = v
    for j, (kind, v) in enumerate(plan.outputs):
        if kind == "alias":
            base = args[v.base] if v.kind == "input" else result[v.base]
            for op, a, kw in v.chain:
                base = op(base, *a, **kw)
            result[j] = base
    return result
