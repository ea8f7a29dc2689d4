"""The Python language inside compiled frames: each case compares with eager and counts graphs."""

import collections
import functools
import itertools
import math
import operator

import pytest
import torch
from frontend_helpers import run_and_compare


def t(*shape):
    return torch.randn(*shape)


Point = collections.namedtuple("Point", ["x", "y"])


def closures(x):
    a = 2

    def mul(v):
        return v * a

    def twice(f, v):
        return f(f(v))

    return twice(mul, x)


def nested_comprehension(x):
    return [[x * i * j for j in range(2)] for i in range(2)]


def dict_ops(x):
    d = {"a": x}
    d["b"] = x * 2
    d.update({"c": x * 3})
    keys = list(d.keys())
    vals = [v.sum() for v in d.values()]
    return keys, vals, d.get("z", 0), "a" in d, len(d)


def list_ops(x):
    xs = [x, x * 2, x * 3]
    xs.reverse()
    first = xs.pop(0)
    xs.extend([first])
    return xs[::-1], xs.index(xs[0]), xs[1:], sorted([3, 1, 2])


def tuple_ops(x):
    a = (1, 2, 3)
    b = a + (4,)
    return x * len(b) * b[-1], b[1:3], a * 2, 2 in a


def unpacking(x):
    a, (b, c), *rest = 1, (2, 3), 4, 5
    first, *middle, last = [x, x + 1, x + 2, x + 3]
    return x * a * b * c + sum(rest), len(middle), last, first


def slicing(x):
    s = "abcdef"
    return x[::2], s[1:4], s[::-1], (1, 2, 3, 4)[1::2]


def chained(x, n):
    return x * 2 if 0 <= n < 5 <= n * 3 else x


def string_formatting(x, n):
    a = f"{n:>4}|{n!r}|{n * 2:.2f}"
    b = "%d-%s" % (n, "k")  # noqa: UP031 (the % operator is what is tested)
    c = "{}/{}".format(n, 2)  # noqa: UP032 (str.format is what is tested)
    return x + len(a + b + c), a, b, c


def booleans(x, a, b):
    c = a and b
    d = a or b
    e = not a
    return x * (c + d + e), any([a, b]), all([a, b])


def ternary_and_walrus(x, n):
    if (m := n * 2) > 3:
        return x * m
    return x


def while_loop(x, n):
    i = 0
    while i < n:
        x = x + i
        i += 1
    return x


def for_else(x):
    for i in range(3):
        if i == 5:
            break
    else:
        x = x + 100
    return x


def loop_continue_break(x):
    for i in range(10):
        if i % 2:
            continue
        if i > 6:
            break
        x = x * 1.5
    return x


def named_tuple(x):
    p = Point(x, x * 2)
    return p.x + p.y, p[0]


def namedtuple_input(p):
    return p.x * p.y


def math_funcs(x, n):
    return x * math.floor(n / 3) + math.log(n) + math.ceil(2.1) + math.gcd(12, 8)


def operator_funcs(x):
    return operator.add(x, 1), operator.getitem([1, 2, 3], 1), operator.neg(x)


def functools_reduce(x):
    return functools.reduce(operator.add, [x, x, x])


def functools_partial_call(x):
    f = functools.partial(torch.add, alpha=2)
    return f(x, x)


def itertools_product(x):
    return [x * i * j for i, j in itertools.product(range(2), range(2))]


def lambda_sorted(x):
    items = [(3, "c"), (1, "a"), (2, "b")]
    return x * items[0][0], sorted(items)


def enumerate_start(x):
    return [x * i for i, _ in enumerate("ab", start=1)]


def zip_dict(x):
    return dict(zip(["a", "b"], [x, x + 1]))


def min_max_key(x):
    return max(3, 7, 5), min([4, 2, 8]), x * abs(-3)


def int_float_ops(x, n):
    return x * (n // 2) + (n % 3) + float(n) / 4 + (n**2) + (-n) + divmod(n, 3)[0]


def bitwise(x, n):
    return x * ((n & 6) | 1 ^ 2), (n << 2) >> 1, ~n


def none_checks(x, y=None):
    if y is None:
        y = x
    return x + y


def isinstance_many(x, v):
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return x * v
    return x


def star_kwargs(x, **kw):
    return x * kw.get("scale", 1) + len(kw)


def star_args_call(x):
    args = [x, x]
    return torch.add(*args), max(*[1, 5, 3])


def nested_functions_defaults(x):
    def inner(v, k=3, *, j=2):
        return v * k + j

    return inner(x), inner(x, 1, j=0)


def generator_fn(x):
    def gen(v):
        for i in range(3):
            yield v * i

    return list(gen(x))


def genexpr_sum(x):
    return sum(x * i for i in range(4))


def local_class_instance_method(x):
    return x.mul(2).add(x).div(3)


def deep_inline(x):
    def a(v):
        return b(v) + 1

    def b(v):
        return c(v) * 2

    def c(v):
        return v.sin()

    return a(x)


def recursion(x, n=3):
    def fact(k):
        return 1 if k <= 1 else k * fact(k - 1)

    return x * fact(n)


def tensor_in_list_check(x):
    xs = [x, x + 1]
    return len(xs), xs[0] is x


def size_arith(x):
    b, c = x.shape
    return x.reshape(b * c).view(-1, c) + b - c


def dtype_branches(x):
    if x.dtype in (torch.float16, torch.bfloat16):
        return x.float()
    if x.is_floating_point():
        return x * 2
    return x


def device_branch(x):
    return x * 2 if x.device.type == "cpu" else x


def global_module_function(x):
    return torch.nn.functional.relu(x) + torch.nn.functional.silu(x)


def tensor_methods_variety(x):
    return (
        x.sum(0).sum(),
        x.t().contiguous().view(-1),
        x.flatten().argsort(),
        x.cumsum(1),
        x.softmax(-1),
        x.clamp(-0.5, 0.5),
        x.masked_fill(x > 0, 0.0),
        x.expand(2, 3).repeat(2, 1),
        x.flip(0),
        x.roll(1, 0),
        x.tril(),
        x.norm(dim=1),
    )


CASES = [
    ("closures", closures, (t(3),), 1),
    ("nested_comprehension", nested_comprehension, (t(3),), 1),
    ("dict_ops", dict_ops, (t(3),), 1),
    ("list_ops", list_ops, (t(3),), 1),
    ("tuple_ops", tuple_ops, (t(3),), 1),
    ("unpacking", unpacking, (t(3),), 1),
    ("slicing", slicing, (t(6),), 1),
    ("chained", chained, (t(3), 2), 1),
    ("string_formatting", string_formatting, (t(3), 7), 1),
    ("booleans", booleans, (t(3), True, False), 1),
    ("walrus", ternary_and_walrus, (t(3), 2), 1),
    ("while_loop", while_loop, (t(3), 4), 1),
    ("for_else", for_else, (t(3),), 1),
    ("continue_break", loop_continue_break, (t(3),), 1),
    ("named_tuple", named_tuple, (t(3),), 1),
    ("math_funcs", math_funcs, (t(3), 7), 1),
    ("operator_funcs", operator_funcs, (t(3),), 1),
    ("functools_reduce", functools_reduce, (t(3),), 1),
    ("itertools_product", itertools_product, (t(3),), 1),
    ("lambda_sorted", lambda_sorted, (t(3),), 1),
    ("enumerate_start", enumerate_start, (t(3),), 1),
    ("zip_dict", zip_dict, (t(3),), 1),
    ("min_max_key", min_max_key, (t(3),), 1),
    ("int_float_ops", int_float_ops, (t(3), 7), 1),
    ("bitwise", bitwise, (t(3), 5), 1),
    ("none_checks", none_checks, (t(3),), 1),
    ("isinstance_many", isinstance_many, (t(3), 2.5), 1),
    ("star_args_call", star_args_call, (t(3),), 1),
    ("nested_defaults", nested_functions_defaults, (t(3),), 1),
    ("generator_fn", generator_fn, (t(3),), 1),
    ("genexpr_sum", genexpr_sum, (t(3),), 1),
    ("method_chain", local_class_instance_method, (t(3),), 1),
    ("deep_inline", deep_inline, (t(3),), 1),
    ("recursion", recursion, (t(3),), 1),
    ("tensor_in_list", tensor_in_list_check, (t(3),), 1),  # the unused x + 1 stays
    ("size_arith", size_arith, (t(2, 3),), 1),
    ("dtype_branches", dtype_branches, (t(3),), 1),
    ("device_branch", device_branch, (t(3),), 1),
    ("global_module_function", global_module_function, (t(3),), 1),
    ("tensor_methods_variety", tensor_methods_variety, (t(1, 3),), 1),
]


@pytest.mark.parametrize("name,fn,args,graphs", CASES, ids=[c[0] for c in CASES])
def test_python_feature(name, fn, args, graphs):
    run_and_compare(fn, *args, expected_graphs=graphs, expected_frames=1, expected_breaks=0)


def test_star_kwargs():
    run_and_compare(star_kwargs, t(3), scale=2, other="x", expected_graphs=1, expected_breaks=0)


def test_namedtuple_input():
    run_and_compare(namedtuple_input, Point(t(3), t(3)), expected_graphs=1, expected_breaks=0)


def test_functools_partial():
    run_and_compare(functools_partial_call, t(3), expected_breaks=None)


def test_slice_builtin():
    def f(x, k):
        s = slice(-k, None)
        return x[s], x[slice(1, 3)]

    run_and_compare(f, t(5), 2, expected_graphs=1, expected_breaks=0)


def test_partial_made_while_tracing():
    import functools

    def scale(v, k, bias=0.0):
        return v * k + bias

    def f(x):
        g = functools.partial(scale, k=3.0)
        h = functools.partial(torch.add, alpha=2)
        return g(x, bias=1.0) + h(x, x), g

    def f_values(x):
        return f(x)[0]

    run_and_compare(f_values, t(3), expected_graphs=1, expected_breaks=0)
    import kiln

    kiln.reset()
    out, g = kiln.compile(f, backend="eager")(t(3))
    assert isinstance(g, functools.partial) and g.func is scale and g.keywords == {"k": 3.0}


def test_module_list_slice():
    import torch.nn as nn

    layers = nn.ModuleList([nn.Linear(3, 3) for _ in range(4)])

    def f(x):
        for layer in layers[1:3]:
            x = layer(x)
        return x * len(layers[:2])

    run_and_compare(f, t(2, 3), expected_graphs=1, expected_breaks=0)
