"""Dict and defaultdict inputs whose keys include tensors are traced (Note [Dicts: inputs keyed by
tensors]): values read through the key tensor, changes replayed after the graph."""

import collections

import pytest
import torch

import kiln


def _factories():
    def closure():
        return {}

    return [dict, list, tuple, set, lambda: {}, closure]


@pytest.mark.parametrize("factory", _factories())
def test_defaultdict_holding_a_parameter_key(factory):
    table = collections.defaultdict(factory)
    param = torch.nn.Parameter(torch.ones(2))

    def fn(x):
        table["a"] = x + 1
        table[param] = 7
        table["c"] = x * 2
        return table["b"], table[param] + 1

    def run(f):
        table.clear()
        fn(torch.ones(2))  # an eager call fills the table (param is now a key)
        return [f(torch.full((2,), float(i))) for i in range(2)], dict(table)

    kiln.reset()
    expected, expected_table = run(fn)
    got, got_table = run(kiln.compile(fn, backend="eager", fullgraph=True))
    assert got[0][0] == expected[0][0] and [g[1] for g in got] == [8, 8]
    assert list(got_table) == list(expected_table) == ["a", param, "c", "b"]
    for k in ("a", "c"):
        assert torch.equal(got_table[k], expected_table[k])
    assert got_table[param] == 7


def _scale_by_key(x, d, k):
    total = x * d.get(k, 0.5)
    for key, value in d.items():
        if isinstance(key, str):
            total = total + value
    return total


def test_dict_input_read_through_a_tensor_key():
    w1, w2 = torch.ones(3), torch.zeros(3)
    d = {"bias": 1.0, w1: 3.0, w2: 5.0}
    kiln.reset()
    compiled = kiln.compile(_scale_by_key, backend="eager", fullgraph=True)
    x = torch.arange(3.0)
    for k in (w1, w2, torch.ones(3), w1):  # a tensor that is no key reads the default
        assert torch.equal(compiled(x, d, k), _scale_by_key(x, d, k))


def _swap_keys(x, d, old, new):
    value = d.pop(old)
    d[new] = value + 1
    d["n"] = d.get("n", 0) + 1
    return x + value


def test_dict_input_with_tensor_keys_replayed():
    a, b, c = torch.ones(1), torch.ones(1), torch.ones(1)
    kiln.reset()
    compiled = kiln.compile(_swap_keys, backend="eager", fullgraph=True)
    for f in (_swap_keys, compiled):
        d = {a: 1, "n": 0}
        f(torch.zeros(1), d, a, b)
        out = f(torch.zeros(1), d, b, c)
        assert torch.equal(out, torch.full((1,), 2.0))
        keys = list(d)
        assert keys[0] == "n" and keys[1] is c and d[c] == 3 and d["n"] == 2 and len(d) == 2
