"""Functions, builtins and containers inside compiled code: each case compares kiln with eager
Python (the cases PyTorch's test/dynamo/test_functions.py exercises, in our own words)."""

import collections
import collections.abc
import functools

import pytest
import torch
from frontend_helpers import run_and_compare

import kiln


def _partial_has(name):
    def fn(t):
        p = functools.partial(lambda a, b: a * 2 + b, b=t)
        return p(t) if hasattr(p, name) else t - 1

    return fn


@pytest.mark.parametrize("name", ["__name__", "__qualname__", "__code__", "func", "__dict__"])
def test_hasattr_of_partial_made_in_frame(name):
    # a partial instance has no __name__ although its class (a type) does
    run_and_compare(_partial_has(name), torch.randn(3), fullgraph=True, expected_graphs=1)


_TABLE = collections.defaultdict(dict)


def _write_global_table(x):
    _TABLE["a"] = x + 1
    return _TABLE["b"], x * 2


def test_empty_defaultdict_global_written():
    # an empty defaultdict(dict) global stays an opaque object: writing it is a graph break
    # with its reason (it used to recurse without end looking for the dict's items)
    _TABLE.clear()
    with pytest.raises(kiln.exc.Unsupported):
        kiln.compile(_write_global_table, backend="eager", fullgraph=True)(torch.ones(3))
    _TABLE.clear()
    kiln.reset()
    got = kiln.compile(_write_global_table, backend="eager")(torch.ones(3))
    assert got[0] == {} and torch.equal(got[1], torch.ones(3) * 2)
    assert list(_TABLE) == ["a", "b"] and torch.equal(_TABLE["a"], torch.ones(3) + 1)
    assert kiln.counters["stats"]["graph_breaks"] == 1, dict(kiln.counters)


def _queries(x):
    if torch.distributed.is_available() and not torch.distributed.is_initialized():
        x = x + 1
    if torch.autograd._is_checkpoint_valid():
        x = x * 2
    if torch._C._are_functorch_transforms_active():
        x = x - 100
    if torch._C._get_privateuse1_backend_name() == "privateuseone":
        x = x + 3
    if not torch._C._is_torch_function_all_disabled():
        x = x * 5
    if x.dtype == torch.promote_types(torch.int32, torch.float32):
        x = x.cos()
    return x, torch.can_cast(torch.float32, torch.int8)


def test_torch_state_queries_fold_in_one_graph():
    run_and_compare(_queries, torch.randn(3), fullgraph=True, expected_graphs=1)


def _tf32(x):
    if torch.backends.cuda.matmul.allow_tf32:
        return x.sin()
    return x.cos()


def test_cublas_flag_read_is_guarded():
    before = torch.backends.cuda.matmul.allow_tf32
    kiln.reset()
    compiled = kiln.compile(_tf32, backend="eager", fullgraph=True)
    x = torch.randn(3)
    try:
        for flag in (False, True, False):
            torch.backends.cuda.matmul.allow_tf32 = flag
            assert torch.equal(compiled(x), _tf32(x))
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
    assert kiln.counters["stats"]["unique_graphs"] == 2, dict(kiln.counters)


def _float_methods(t, m):
    n, d = m.as_integer_ratio()
    out = t * n / d + m.conjugate()
    if m.is_integer():
        out = out * 2
    return out, m.hex()


def test_float_methods_of_an_unspecialised_float_argument():
    # the float becomes a graph input after its value changes; its own methods read the value
    kiln.reset()
    compiled = kiln.compile(_float_methods, backend="eager", fullgraph=True)
    t = torch.ones(2)
    for m in (1.0, 1.5, 2.0, 2.5, 3.0):
        got, want = compiled(t, m), _float_methods(t, m)
        assert torch.equal(got[0], want[0]) and got[1] == want[1], m


class _Plain:
    pass


def _class_vs_literals(x):
    hits = [_Plain == None, _Plain != None, _Plain == 3, "a" == _Plain, _Plain != "x"]  # noqa: E711
    return x + sum(hits), hits


def test_class_compared_with_literals():
    run_and_compare(_class_vs_literals, torch.randn(2), fullgraph=True, expected_graphs=1)


def _deque_insert(x):
    d = collections.deque([x, x + 1])
    d.insert(0, "head")
    d.insert(-1, x * 3)
    d.insert(10, 5)
    full = collections.deque([1, 2], maxlen=2)
    try:
        full.insert(1, 9)
        err = None
    except IndexError as e:
        err = str(e)
    return list(d), err, list(full)


def test_deque_insert():
    run_and_compare(_deque_insert, torch.randn(2), fullgraph=True, expected_graphs=1)


def _od_fromkeys(x):
    a = collections.OrderedDict.fromkeys(("p", "q"), value=x)
    b = collections.OrderedDict.fromkeys(iterable="rs", value=2)
    c = collections.OrderedDict.fromkeys(iterable=["t"])
    errors = []
    for kw in ({"foo": 1}, {"value": 1, "iterable": "a", "x": 2}):
        try:
            collections.OrderedDict.fromkeys("ab", **kw)
        except TypeError as e:
            errors.append(str(e))
    return a["q"] * b["s"], list(a), dict(b), dict(c), errors


def test_ordered_dict_fromkeys_with_keywords():
    run_and_compare(_od_fromkeys, torch.randn(2), fullgraph=True, expected_graphs=1)


def _legacy_types(a, b):
    half = a.type(torch.HalfTensor)
    name = half.type()
    c = b.type(name)
    d = b.type("torch.DoubleTensor")
    same = a.type(torch.float32)
    return c, d, name, a.type(), same is a, c.dtype, d.dtype


def test_tensor_legacy_type_names():
    run_and_compare(
        _legacy_types, torch.randn(3), torch.randn(3), fullgraph=True, expected_graphs=1
    )


def _tensor_sets(a, b):
    y = a.add_(1)  # the very tensor a
    s = {a, b}
    s.add(y)
    fs = frozenset(s)
    found = (y in s, a in fs, b.clone() in s, 3 in s, len(s), len(set([a, a, b])))
    s.discard(b)
    return found, len(s), a in s, b in s, list(s)


def test_sets_of_tensors_by_identity():
    run_and_compare(_tensor_sets, torch.zeros(2), torch.ones(3), fullgraph=True, expected_graphs=1)


def _membership(p, q):
    p.mul_(2)
    return p in {q}, q * 1


def test_set_membership_of_aliased_inputs_recompiles():
    kiln.reset()
    compiled = kiln.compile(_membership, backend="eager", fullgraph=True)
    x, y = torch.ones(2), torch.ones(2)
    assert compiled(x, y)[0] is False
    assert compiled(x, x)[0] is True  # the same object twice: another entry
    assert compiled(y, x)[0] is False
    assert kiln.counters["stats"]["unique_graphs"] == 2, dict(kiln.counters)


def _maybe_same(x):
    y = x.float()  # x itself in eager (a float tensor)
    return y is x, x.contiguous() is x, x + 1


def test_tensor_that_may_be_its_operand_is_not_answered():
    # kiln does not guess whether the node's output is its operand: `is` breaks, Python decides
    kiln.reset()
    compiled = kiln.compile(_maybe_same, backend="eager")
    x = torch.ones(2)
    got, want = compiled(x), _maybe_same(x)
    assert got[:2] == want[:2] == (True, True) and torch.equal(got[2], want[2])
    with pytest.raises(kiln.exc.Unsupported):
        kiln.compile(lambda t: t.float() in {t}, backend="eager", fullgraph=True)(x)


_WEIGHT = torch.nn.Parameter(torch.ones(2))


def _tensor_keyed(a, b):
    d = {"a": a, _WEIGHT: 3}
    d[b] = b * 2
    d[a] = d.get(a, 0) + 1
    found = (_WEIGHT in d, b.clone() in d, d.get(b.clone(), "missing"))
    counts = {t: i for i, t in enumerate([a, b, a])}
    return d["a"] + d[_WEIGHT], d[b], found, len(d), list(counts.values()), d.pop(b)


def test_tensors_as_dict_keys():
    run_and_compare(_tensor_keyed, torch.zeros(2), torch.ones(2), fullgraph=True, expected_graphs=1)


def _keyed_pair(p, q):
    return len({p: 1, q: 2}), p + q


def test_dict_of_aliased_tensor_inputs_recompiles():
    kiln.reset()
    compiled = kiln.compile(_keyed_pair, backend="eager", fullgraph=True)
    x, y = torch.ones(2), torch.ones(2)
    assert compiled(x, y)[0] == 2
    assert compiled(x, x)[0] == 1
    assert kiln.counters["stats"]["unique_graphs"] == 2, dict(kiln.counters)


_GROUPS = collections.defaultdict(list)
_KEY = torch.nn.Parameter(torch.ones(2))


def _group(x):
    _GROUPS["a"].append(x + 1)
    _GROUPS[_KEY].append(2)
    return len(_GROUPS["missing"]), x * 2


def test_empty_defaultdict_of_lists_input_traced():
    _GROUPS.clear()
    kiln.reset()
    compiled = kiln.compile(_group, backend="eager", fullgraph=True)
    got = compiled(torch.ones(2))
    assert got[0] == 0 and torch.equal(got[1], torch.ones(2) * 2)
    assert list(_GROUPS) == ["a", _KEY, "missing"] and _GROUPS[_KEY] == [2]
    assert torch.equal(_GROUPS["a"][0], torch.ones(2) + 1) and _GROUPS["missing"] == []


class _Settings(collections.abc.Mapping):
    def __init__(self, **kw):
        self._d = dict(kw)

    def __getitem__(self, key):
        return self._d[key] * 10

    def __iter__(self):
        return iter(self._d)

    def __len__(self):
        return len(self._d)


def _scaled(x, alpha=1, beta=2):
    return x * alpha + beta


_SETTINGS = _Settings(alpha=3)


def _star_star_mapping(x):
    merged = {**_SETTINGS, "beta": 1}
    local = _Settings(beta=0.5)
    return _scaled(x, **_SETTINGS), _scaled(x, **local), merged


def test_double_star_of_a_user_mapping():
    # ** reads keys() then m[k] for each key: the mapping's own __getitem__ runs
    run_and_compare(_star_star_mapping, torch.ones(2), fullgraph=True, expected_graphs=1)


def _foreach_with_tensor_scalars(xs, ys, w, s):
    out = torch._foreach_lerp_(xs, ys, w)
    pows = torch._foreach_pow(s, ys)
    return out is xs, xs, pows


def test_foreach_ops_with_0d_tensor_arguments():
    xs = [torch.ones(2) * 4.0, torch.ones(3) * 2.0]
    ys = [torch.ones(2), torch.ones(3) * 3.0]
    run_and_compare(
        _foreach_with_tensor_scalars,
        xs,
        ys,
        torch.tensor(0.25),
        torch.tensor(1.5),
        fullgraph=True,
        expected_graphs=1,
    )
