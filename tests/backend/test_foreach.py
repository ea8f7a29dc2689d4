"""`torch._foreach_*` ops: decomposed per tensor (Note [Foreach: one op per tensor]), fused."""

import copy

import pytest
import torch

import kiln
from kiln import hooks
from kiln.backend.decomp_foreach import foreach_decompositions
from tests.backend.helpers import check

aten = torch.ops.aten
DECOMPS = foreach_decompositions()


def _lists(n=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(4, 5), (7,), ()]
    return [torch.rand(shapes[k % 3], generator=gen) + 0.5 for k in range(n)]


# (overload, args builder): the rule of each row of ELEMENT_RULES against the ATen op
CASES = [
    (aten._foreach_add.Scalar, lambda: (_lists(), 2.5)),
    (aten._foreach_add.List, lambda: (_lists(), _lists(seed=1)), {"alpha": -0.5}),
    (aten._foreach_add.ScalarList, lambda: (_lists(), [1.0, 2.0, 3.0])),
    (aten._foreach_add.Tensor, lambda: (_lists(), torch.tensor(0.25))),
    (aten._foreach_sub.List, lambda: (_lists(), _lists(seed=1))),
    (aten._foreach_mul.Scalar, lambda: (_lists(), 0.999)),
    (aten._foreach_mul.Tensor, lambda: (_lists(), torch.tensor(3.0))),
    (aten._foreach_div.List, lambda: (_lists(), _lists(seed=1))),
    (aten._foreach_div.ScalarList, lambda: (_lists(), [2.0, -1.0, 0.5])),
    (aten._foreach_maximum.List, lambda: (_lists(), _lists(seed=1))),
    (aten._foreach_clamp_min.Scalar, lambda: (_lists(), 0.9)),
    (aten._foreach_lerp.Scalar, lambda: (_lists(), _lists(seed=1), 0.1)),
    (aten._foreach_lerp.Scalar, lambda: (_lists(), _lists(seed=1), 0.9)),
    (aten._foreach_lerp.List, lambda: (_lists(), _lists(seed=1), _lists(seed=2))),
    (aten._foreach_addcmul.Scalar, lambda: (_lists(), _lists(seed=1), _lists(seed=2), 0.3)),
    (
        aten._foreach_addcdiv.ScalarList,
        lambda: (_lists(), _lists(seed=1), _lists(seed=2), [0.1, 0.2, 0.3]),
    ),
    (
        aten._foreach_addcdiv.Tensor,
        lambda: (_lists(), _lists(seed=1), _lists(seed=2), torch.tensor([0.1, -0.2, 0.3])),
    ),
    (aten._foreach_pow.Scalar, lambda: (_lists(), 2.0)),
    (aten._foreach_pow.ScalarAndTensor, lambda: (0.9, _lists())),
    (aten._foreach_sqrt.default, lambda: (_lists(),)),
    (aten._foreach_neg.default, lambda: (_lists(),)),
    (aten._foreach_reciprocal.default, lambda: (_lists(),)),
    (aten._foreach_norm.Scalar, lambda: (_lists(), 2)),
    (aten._foreach_zero.default, lambda: (_lists(),)),
    (aten._foreach_copy.default, lambda: (_lists(), _lists(seed=1))),
]


def _inplace(overload):
    name, ov = overload.name().split("::")[1].split(".")[0], overload._overloadname
    packet = getattr(aten, name + "_", None)
    return getattr(packet, ov, None) if packet is not None else None


@pytest.mark.parametrize("case", CASES, ids=lambda c: str(c[0]))
def test_rule_equals_the_aten_op(case):
    overload, make = case[0], case[1]
    kwargs = case[2] if len(case) > 2 else {}
    want = overload(*make(), **kwargs)
    got = DECOMPS[overload](*make(), **kwargs)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
    inplace = _inplace(overload)
    if inplace is None:
        return
    a, b = make(), make()
    assert inplace(*a, **kwargs) is None and DECOMPS[inplace](*b, **kwargs) is None
    torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6)  # the same values written


def test_foreach_chain_compiles_to_one_kernel_per_shape_and_no_aten_calls():
    def fn(*ts):
        zs = torch._foreach_mul(list(ts[:3]), 0.5)
        zs = torch._foreach_add(zs, list(ts[3:]), alpha=2)
        return tuple(torch._foreach_sqrt(torch._foreach_abs(zs)))

    c = check(fn, [torch.randn(64, 33) for _ in range(6)])
    assert "foreach" not in c.wrapper_src
    assert c.kernel_count <= 3  # one loop per list element (or fewer)


@pytest.fixture
def compiled_graphs():
    seen = []

    def keep(compiled, gm, inputs):
        seen.append(compiled)
        return compiled

    hooks.register("backend_graph", keep)
    kiln.reset()
    yield seen
    hooks._HOOKS["backend_graph"].remove(keep)


@pytest.mark.parametrize("name", ["Adam", "AdamW", "SGD"])
def test_optimizer_step_updates_each_parameter_in_one_pass_in_place(name, compiled_graphs):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(40, 40) for _ in range(3)])
    ref = copy.deepcopy(model)
    kw = dict(lr=0.01, foreach=True, **({"momentum": 0.9} if name == "SGD" else {}))
    oc = getattr(torch.optim, name)(model.parameters(), **kw)
    oe = getattr(torch.optim, name)(ref.parameters(), **kw)
    step = kiln.compile(oc.step)
    for i in range(4):
        gen = torch.Generator().manual_seed(i)
        for p, q in zip(model.parameters(), ref.parameters()):
            p.grad = torch.randn(p.shape, generator=gen)
            q.grad = p.grad.clone()
        step()
        oe.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
        for k, v in oe.state[q].items():
            torch.testing.assert_close(oc.state[p][k], v, rtol=1e-5, atol=1e-6)
    last = compiled_graphs[-1]  # the steady-state step (the first one also made the state)
    assert not last.fallback_ops, last.fallback_ops
    # every state tensor and parameter is written in place: nothing allocated, nothing copied
    assert "empty_strided(" not in last.wrapper_src.split("def call")[1]
    # one loop per weight (the biases, tiny, may share one), and one for the step counters
    assert last.kernel_count <= 2 * 3 + 1, last.cpp_src
    # the weights' loops are one C++ function, called for each (Note [Codegen: kernels with the
    # same code])
    assert last.cpp_src.count("// the code of kernel") >= 2, last.cpp_src
