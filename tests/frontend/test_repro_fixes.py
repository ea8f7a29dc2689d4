"""Wrong results and crashes found on third-party code (issue 17, sections 1 and 2).

Each test compares with eager; where torch.compile captures the code whole, so does kiln
(fullgraph=True), and otherwise the break is a clean one.
"""

import ast
import collections
from collections.abc import MutableMapping

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln

# --- 1. wrong results -------------------------------------------------------------------------


def test_substring_and_literal_containment_fold_like_python():
    def fn(x, s):
        tag = f"{x.shape[0]} rows"
        hits = ("ab" in s, "zz" in s, "10" in tag, b"b" in b"abc", 3 in range(5), 2 in (1, 2))
        return (x + 1 if "ab" in s else x - 1), hits

    run_and_compare(fn, torch.ones(10, 3), "abc", fullgraph=True, expected_graphs=1)


def test_in_place_ops_return_the_tensor_they_mutated():
    def fn(x, out):
        y = x.add_(1)
        z = x.unsqueeze_(0)
        w = torch.mul(x, 2, out=out)
        v = x
        v += 3
        return y is x, z is x, w is out, v is x, y, out, y.shape

    for backend in (None, "aot_eager"):
        run_and_compare(fn, torch.ones(4), torch.empty(1, 4), fullgraph=True, backend=backend)


def test_tensor_new_with_each_argument_form():
    def fn(x, t):
        y = torch.rand(5, 8)
        shapes = [
            x.new(y.size()).shape,  # a torch.Size: sizes
            x.new(y.shape).shape,
            x.new(3, 4).shape,  # ints: sizes
            x.new(x.shape[0]).shape,
            x.new().shape,
            x.new(size=(2, 2)).shape,
        ]
        data = x.new([1, 2]), x.new((3, 4))  # a list / tuple: data
        alias = x.new(t)  # a tensor of x's dtype: an alias
        alias.mul_(2)
        return shapes, [a.dtype for a in data], data, t

    run_and_compare(fn, torch.ones(10, 10), torch.arange(3.0), fullgraph=True)


def test_module_method_named_like_a_submodule_is_the_method():
    class Scaled(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.activation = torch.nn.ReLU()  # stored in _modules

        def activation(self, x):  # a class attribute: Python finds it first
            return x * 1.2

        def forward(self, x):
            return self.activation(x)

    m = Scaled()
    x = torch.tensor([-1.0, 2.0])
    compiled = kiln.compile(m, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(x), m(x))


def test_isinstance_runs_the_metaclass_instancecheck():
    def fn(x, storage, p):
        checks = (
            isinstance(storage, torch.BoolStorage),  # _LegacyStorageMeta looks at the dtype
            isinstance(storage, torch.FloatStorage),
            isinstance(p, torch.nn.Parameter),
            isinstance(x, torch.nn.Parameter),
        )
        return x + 1, checks

    with pytest.warns(UserWarning, match="TypedStorage is deprecated"):
        storage = torch.BoolStorage.from_buffer(bytearray([0, 1, 2, 3]), "big")
    p = torch.nn.Parameter(torch.randn(2))
    run_and_compare(fn, torch.randn(3), storage, p)


def test_values_read_before_a_break_survive_the_replayed_stores():
    def appended(x):
        items = [x]
        items.append(x + 1)
        items[0].sum().item()  # a graph break
        return items.pop()

    run_and_compare(appended, torch.ones(2), expected_breaks=1)

    class Box:
        pass

    def swapped(box, x):
        old = box.value
        box.value = x + 1
        return old

    box = Box()
    box.value = torch.full((2,), 7.0)
    compiled = kiln.compile(swapped, backend="eager", fullgraph=True)
    assert compiled(box, torch.ones(2)) is not None
    torch.testing.assert_close(box.value, torch.full((2,), 2.0))
    box.value = torch.full((2,), 5.0)
    torch.testing.assert_close(compiled(box, torch.ones(2)), torch.full((2,), 5.0))


def test_dict_views_compare_and_combine_as_sets():
    def fn(x):
        d = {3: x, 4: x}
        d2 = {3: 2, 4: "aa"}
        keys = d.keys()
        d[5] = x  # the view sees it
        return x + 1, (
            d2.keys() == d.keys(),
            keys == {3, 4, 5},
            d.keys() - {3},
            {4} & d2.keys(),
            d2.items() == {(3, 2), (4, "aa")},
            d.items() == dict(d).items(),
            d.values() == d.values(),
            d2.keys() <= d.keys(),
            d.keys() != [3, 4, 5],
            len(keys),
            5 in keys,
            list(keys),
        )

    run_and_compare(fn, torch.ones(2), fullgraph=True)


# --- 2. crashes -------------------------------------------------------------------------------


class _TensorMap(MutableMapping):
    def __init__(self):
        self._store = {}

    def __getitem__(self, k):
        return self._store[k]

    def __setitem__(self, k, v):
        self._store[k] = v

    def __delitem__(self, k):
        del self._store[k]

    def __iter__(self):
        return iter(self._store)

    def __len__(self):
        return len(self._store)


def test_dict_of_a_user_mapping():
    tm = _TensorMap()
    tm["a"] = torch.ones(4) * 2
    tm["b"] = torch.ones(4)

    def fn(x):
        d = dict(tm)
        return x * d["a"] + d["b"], list(d)

    run_and_compare(fn, torch.randn(4))


Shape = collections.namedtuple("Shape", ["rows", "cols"])


def test_tensor_op_sequence_arguments_of_any_type():
    def fn(x):
        return torch.tensor(range(x.size(0))), x + torch.zeros(Shape(4, 3)), torch.ones(Shape(2, 2))

    for backend in (None, "aot_eager"):
        run_and_compare(fn, torch.ones(4, 3), fullgraph=True, backend=backend)


def test_property_implemented_in_c_is_read_and_guarded():
    def fn(x, info):
        if info.result:
            return torch.cos(x)
        return torch.sin(x)

    make = torch._C._dynamo.guards.GuardDebugInfo  # a pybind11 class with def_readonly fields
    x = torch.randn(4)
    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    for result in (True, False):
        info = make(result, ["a==1"], 0)
        torch.testing.assert_close(compiled(x, info), fn(x, info))


def test_getattr_hook_raising_keyerror_on_an_argument():
    class Config(dict):
        def __getattr__(self, name):
            return self[name]

    def fn(cfg, x, y):
        return x + y + cfg.offset

    run_and_compare(fn, Config(offset=5), torch.randn(3), torch.randn(3))


_REWRITTEN = """
def checked(x):
    y = x * 2
    assert y.sum().item() > -1e9
    z = y + 1
    assert z.max().item() < 1e9, "big"
    return z
"""


def test_breaks_in_code_whose_locals_are_not_identifiers():
    from _pytest.assertion.rewrite import rewrite_asserts

    tree = ast.parse(_REWRITTEN)
    rewrite_asserts(tree, _REWRITTEN.encode())  # what pytest does: locals named @py_assert1
    ns = {}
    exec(compile(tree, "<rewritten>", "exec"), ns)
    assert any(not n.isidentifier() for n in ns["checked"].__code__.co_varnames)
    run_and_compare(ns["checked"], torch.ones(3), expected_breaks=2)


def test_tensor_bound_in_a_slice_never_enters_the_graph_code():
    def fn(lengths, y):
        i = lengths[3]
        y[(3, slice(i, None, None))] = 0
        return (y,)

    lengths = torch.arange(10, dtype=torch.int64) + 100
    run_and_compare(fn, lengths, torch.randn(10, 204), backend="aot_eager")


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_gru(backend):
    """nn.GRU breaks (as under torch.compile, which leaves RNNs to eager) and stays correct; its
    loop over the weights hands resume functions tensors of other ranks in one stack slot."""
    gru = torch.nn.GRU(4, 6, batch_first=True)

    def fn(a):
        out, h = gru(a)
        return out, h

    kiln.reset()
    compiled = kiln.compile(fn, backend=backend)
    a = torch.randn(2, 3, 4)
    for _ in range(2):
        for got, want in zip(compiled(a), fn(a)):
            torch.testing.assert_close(got, want)
