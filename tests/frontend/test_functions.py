"""Small eager-vs-compiled function tests: each counts graphs and frames."""

import math
import operator

import pytest
import torch
import torch.nn.functional as F
from frontend_helpers import run_and_compare

import kiln


def t(*shape, **kw):
    return torch.randn(*shape, **kw)


GLOBAL_SCALE = 3.0


def helper_add(a, b):
    return a + b


def helper_nested(a):
    return helper_add(a, a) * 2


def helper_defaults(a, scale=2.0, *, shift=1.0):
    return a * scale + shift


def helper_varargs(*xs, **kw):
    out = xs[0]
    for x in xs[1:]:
        out = out + x
    return out * kw.get("factor", 1)


# --- (name, fn, args, expected graphs) -----------------------------------------------------------
CASES = [
    ("sin", lambda x: torch.sin(x), (t(4),), 1),
    ("method_chain", lambda x: x.cos().cos(), (t(3, 3),), 1),
    ("add_mul", lambda x, y: x * y + x, (t(5), t(5)), 1),
    ("radd_const", lambda x: 2 + x * 3 - 1, (t(4),), 1),
    ("div_pow", lambda x: (x / 2) ** 2 // 1, (t(4),), 1),
    ("neg_abs", lambda x: -abs(x), (t(4),), 1),
    ("matmul_op", lambda a, b: a @ b, (t(3, 4), t(4, 2)), 1),
    ("comparison", lambda x: (x > 0) & (x < 1), (t(6),), 1),
    ("where", lambda x: torch.where(x > 0, x, torch.zeros_like(x)), (t(6),), 1),
    ("shape_view", lambda x: x.view(x.shape[0], -1), (t(2, 3, 4),), 1),
    ("size_calls", lambda x: x.reshape(x.size(0) * x.size(1), x.size()[2]), (t(2, 3, 4),), 1),
    ("dim_ndim", lambda x: x.sum(dim=x.dim() - 1) + x.ndim, (t(2, 3),), 1),
    ("transpose_T", lambda x: x.T.contiguous(), (t(2, 3),), 1),
    ("numel", lambda x: x.flatten() / x.numel(), (t(2, 3),), 1),
    ("dtype_attr", lambda x: x.to(torch.float64) if x.dtype == torch.float32 else x, (t(3),), 1),
    ("dtype_kw", lambda x: torch.zeros(3, dtype=x.dtype) + x, (t(3),), 1),
    ("factory", lambda x: x + torch.ones(4, 4), (t(4, 4),), 1),
    ("arange", lambda x: x * torch.arange(4), (t(4),), 1),
    ("device_attr", lambda x: torch.ones(2, device=x.device) + x, (t(2),), 1),
    ("functional", lambda x: F.relu(x) + F.gelu(x), (t(8),), 1),
    ("softmax", lambda x: F.softmax(x, dim=-1), (t(2, 5),), 1),
    ("linear_fn", lambda x, w, b: F.linear(x, w, b), (t(2, 3), t(4, 3), t(4)), 1),
    (
        "cat_stack",
        lambda x, y: torch.cat([x, y], dim=0) + torch.stack((x, y)).sum(0).sum(),
        (t(2), t(2)),
        1,
    ),
    ("split_unpack", lambda x: (lambda a, b: a * b)(*x.split(2)), (t(4),), 1),
    ("chunk_index", lambda x: x.chunk(3)[1], (t(6),), 1),
    ("getitem_slices", lambda x: x[1:, ::2] + x[0, None, ::2], (t(4, 6),), 1),
    ("getitem_ellipsis", lambda x: x[..., 0], (t(2, 3, 4),), 1),
    ("tensor_setitem", lambda x: x.clone().index_fill_(0, torch.tensor([0]), 1.0), (t(3),), 1),
    ("return_tuple", lambda x: (x.sin(), x.cos()), (t(3),), 1),
    ("return_list", lambda x: [x + 1, 2, "s", None], (t(3),), 1),
    ("return_dict", lambda x: {"a": x * 2, "b": (x, 3)}, (t(3),), 1),
    ("return_input", lambda x, y: (x, y + 1), (t(3), t(3)), 1),
    ("return_same_twice", lambda x: (lambda y: (y, y))(x.exp()), (t(3),), 1),
    ("return_shape", lambda x: x.shape, (t(2, 3),), 0),
    ("return_dtype", lambda x: x.dtype, (t(2),), 0),
    ("no_tensor_ops", lambda a, b: a * b + 1, (3, 4), 0),
    ("constant_only_str", lambda s: s.upper() + "!", ("abc",), 0),
    ("int_arg", lambda x, n: x * n + n, (t(3), 5), 1),
    ("float_arg", lambda x, s: x * s, (t(3), 0.5), 1),
    ("bool_arg", lambda x, flag: x + 1 if flag else x - 1, (t(3), True), 1),
    ("none_arg", lambda x, y: x if y is None else x + y, (t(3), None), 0),
    ("none_arg_not", lambda x, y: x if y is None else x + y, (t(3), t(3)), 1),
    ("global_const", lambda x: x * GLOBAL_SCALE, (t(3),), 1),
    ("math_module", lambda x: x * math.sqrt(2.0) + math.pi, (t(3),), 1),
    ("operator_module", lambda x: operator.mul(x, 2), (t(3),), 1),
    ("inline_user_fn", lambda x, y: helper_add(x, y).relu(), (t(3), t(3)), 1),
    ("inline_nested", lambda x: helper_nested(x), (t(3),), 1),
    (
        "inline_defaults",
        lambda x: helper_defaults(x) + helper_defaults(x, 3.0, shift=0.5),
        (t(3),),
        1,
    ),
    ("inline_varargs", lambda x, y: helper_varargs(x, y, x, factor=2), (t(3), t(3)), 1),
    ("tuple_arg", lambda xs: xs[0] + xs[1], ((t(3), t(3)),), 1),
    ("list_arg_len", lambda xs: sum(xs) / len(xs), ([t(3), t(3), t(3)],), 1),
    ("dict_arg", lambda d: d["x"] * d["y"], ({"x": t(3), "y": t(3)},), 1),
    (
        "dict_items",
        lambda d: [k for k, v in d.items() if v.dim() == 1],
        ({"a": t(3), "b": t(2, 2)},),
        0,
    ),
    ("loop_range", lambda x: sum(x * i for i in [1, 2, 3]), (t(3),), 1),
    ("for_range", None, (t(3),), 1),
    ("enumerate_zip", None, (t(3), t(3)), 1),
    ("list_comp", lambda x: torch.stack([x * i for i in range(3)]), (t(2),), 1),
    ("dict_comp", lambda x: {str(i): x + i for i in range(2)}, (t(2),), 1),
    ("local_list_mutation", None, (t(3),), 1),
    ("unpack_star", None, (t(3), t(3), t(3)), 1),
    (
        "isinstance_checks",
        lambda x, n: x * 2 if isinstance(x, torch.Tensor) and isinstance(n, int) else x,
        (t(3), 4),
        1,
    ),
    ("fstring", lambda x, n: (x + n, f"n={n:03d}"), (t(3), 7), 1),
    ("chained_compare", lambda x, n: x * 2 if 0 < n < 10 else x, (t(3), 5), 1),
    ("in_operator", lambda x, k: x + 1 if k in ("a", "b") else x, (t(3), "a"), 1),
    ("min_max_consts", lambda x, a, b: x * max(a, b) - min(a, b, 0), (t(3), 2, 5), 1),
    ("closure", None, (t(3),), 1),
    ("inplace_input", lambda x: x.add_(1), (t(3),), 1),
    ("inplace_iadd", None, (t(3),), 1),
    ("grad_input", lambda x: (x * x).sum(), (t(3, requires_grad=True),), 1),
    ("int_tensor", lambda x: (x * 2) // 3 % 5, (torch.arange(6),), 1),
    ("bool_not_const", lambda x, b: x if not b else -x, (t(2), False), 0),
    ("keyword_args", lambda x, y: torch.add(x, y, alpha=2), (t(3), t(3)), 1),
    ("tensor_kwarg_method", lambda x: x.sum(dim=0, keepdim=True), (t(3, 2),), 1),
    ("torch_size", lambda x: x.new_zeros(torch.Size([2, 2])) + x.sum(), (t(3),), 1),
    ("unsqueeze_expand", lambda x: x.unsqueeze(0).expand(3, -1) * 1, (t(4),), 1),
    ("max_dim_tuple", lambda x: x.max(dim=0).values + x.max(dim=0)[1], (t(3, 4),), 1),
    ("iterate_tensor", lambda x: [r.sum() for r in x], (t(3, 2),), 1),
    ("dropout_eval", lambda x: F.dropout(x, p=0.5, training=False), (t(4),), 1),
]


def for_range(x):
    acc = x
    for i in range(3):
        acc = acc * 2 + i
    return acc


def enumerate_zip(x, y):
    out = []
    for i, (a, b) in enumerate(zip([x, y], [y, x])):
        out.append(a * b + i)
    return out


def local_list_mutation(x):
    acc = []
    acc.append(x)
    acc.extend([x + 1, x + 2])
    acc.insert(0, x * 0)
    last = acc.pop()
    return acc, last, len(acc)


def unpack_star(a, b, c):
    first, *rest = [a, b, c]
    x, (y, z) = first, rest
    return x + y * z


def make_closure():
    scale = 4.0

    def fn(x):
        return x * scale

    return fn


def inplace_iadd(x):
    y = x * 1
    y += 2
    y *= 3
    return y


_NAMED = {
    "for_range": for_range,
    "enumerate_zip": enumerate_zip,
    "local_list_mutation": local_list_mutation,
    "unpack_star": unpack_star,
    "closure": make_closure(),
    "inplace_iadd": inplace_iadd,
}


@pytest.mark.parametrize("name,fn,args,graphs", CASES, ids=[c[0] for c in CASES])
def test_function(name, fn, args, graphs):
    fn = fn or _NAMED[name]
    run_and_compare(fn, *args, expected_graphs=graphs, expected_frames=1, expected_breaks=0)


def test_kwargs_call():
    def f(x, *, scale=2.0, bias=None):
        out = x * scale
        return out if bias is None else out + bias

    run_and_compare(f, t(3), scale=3.0, expected_graphs=1, expected_frames=1)
    run_and_compare(f, t(3), bias=t(3), expected_graphs=1, expected_frames=1)


def test_method_of_user_object():
    class Scaler:
        def __init__(self):
            self.factor = 3

        def scale(self, x):
            return x * self.factor

        @property
        def double(self):
            return self.factor * 2

    s = Scaler()
    run_and_compare(lambda x: s.scale(x) + s.double, t(3), expected_graphs=1, expected_frames=1)


def test_exception_in_op_matches_eager():
    def f(x, y):
        return x + y  # shapes do not broadcast

    run_and_compare(f, t(3), t(4), expected_graphs=0, expected_breaks=1)


def test_backend_called_once_per_graph_with_real_inputs():
    from frontend_helpers import CountingBackend

    backend = CountingBackend()
    x, y = t(3), t(3)
    f = kiln.compile(lambda a, b: a.sin() + b, backend=backend)
    for _ in range(5):
        f(x, y)
    assert backend.calls == 1
    assert backend.example_inputs[0][0] is x and backend.example_inputs[0][1] is y
    gm = backend.graphs[0]
    targets = [n.target for n in gm.graph.nodes if n.op != "placeholder" and n.op != "output"]
    assert targets == ["sin", operator.add]
    assert all("example_value" in n.meta for n in gm.graph.nodes if n.op != "output")


def test_function_without_tensor_ops_calls_no_backend():
    from frontend_helpers import CountingBackend

    kiln.reset()
    backend = CountingBackend()
    f = kiln.compile(lambda a, b: (a + b, [a] * b), backend=backend)
    assert f(2, 3) == (5, [2, 2, 2])
    assert backend.calls == 0
    assert kiln.counters["frames"]["ok"] == 1


def test_device_of_a_tensor_made_with_a_device_argument():
    def f(x):
        r = torch.arange(x.shape[0], device=x.device)
        m = torch.ones(2, device=r.device)  # the device of r is the real one
        return (x + r.to(r.device)).sum() + m.sum(), r.device

    run_and_compare(f, torch.randn(3), expected_graphs=1, expected_breaks=0)


def test_device_and_finfo_constructors():
    def f(x):
        d = torch.device(type="cpu")
        lo = torch.finfo(x.dtype).min
        return x.to(d).clamp(min=lo) + torch.iinfo(torch.int32).bits

    run_and_compare(f, torch.randn(3), expected_graphs=1, expected_breaks=0)


def test_number_plus_equals_tensor():
    def f(xs):
        acc = 0
        for x in xs:
            acc += x * 2
        return acc

    backend_graphs = []

    def backend(gm, example_inputs):
        gm.recompile()  # the graph's code must be valid Python
        backend_graphs.append(gm)
        return gm.forward

    run_and_compare(f, [torch.randn(2), torch.randn(2)], backend=backend)
    assert "0 +=" not in backend_graphs[0].code


def _with_defaults(x, scale=2.0, *rest, shift=1.0, **extra):
    return x * scale + shift + len(rest) + len(extra)


def test_defaults_reassigned_between_calls_are_read_again():
    """Signatures are cached per code; the default values still come from each call's function."""

    def run(x):
        a = _with_defaults(x)
        b = _with_defaults(x, 3.0, 1, 2, shift=0.5, k=1)
        return a + b

    x = t(3)
    saved = (_with_defaults.__defaults__, _with_defaults.__kwdefaults__)
    compiled = kiln.compile(run, backend="eager")
    try:
        assert torch.allclose(compiled(x), run(x))
        _with_defaults.__defaults__ = (5.0,)
        _with_defaults.__kwdefaults__ = {"shift": -2.0}
        assert torch.allclose(compiled(x), run(x))
        _with_defaults.__kwdefaults__ = None  # shift now required: the call without it raises

        def missing(x):
            try:
                return _with_defaults(x)
            except TypeError as e:
                return str(e)

        assert kiln.compile(missing, backend="eager")(x) == missing(x)
    finally:
        _with_defaults.__defaults__, _with_defaults.__kwdefaults__ = saved
