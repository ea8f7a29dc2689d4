"""Instances of a list subclass that only adds methods, passed into the frame, compiled vs eager
(Note [Lists: subclass instances from outside the frame])."""

import torch
from frontend_helpers import assert_same, counted_compile


class Processors(list):
    def __call__(self, x):
        for processor in self:
            x = processor(x)
        return x

    def length_times_10(self):
        return len(self) * 10

    def append_twice(self, x):
        self.extend([x, x])


def _merge(default_list, custom_list):
    if len(custom_list) == 0:
        return default_list
    for default in default_list:
        for custom in custom_list:
            if type(custom) is type(default):
                raise ValueError
    default_list.extend(custom_list)
    return default_list


def _compare_on_fresh_lists(fn, make_args, graph_count):
    """fn eagerly, then compiled twice, each on fresh arguments from make_args(): the outputs
    and the lists passed in (type, items) agree, in `graph_count` graphs."""
    compiled, graphs = counted_compile(fn, fullgraph=True)
    results = []
    for f in (fn, compiled, compiled):
        args = make_args()
        out = f(*args)
        lists = [(type(a), list(a)) for a in args if isinstance(a, list)]
        results.append((out, lists))
    for got in results[1:]:
        assert_same(results[0], got)
    assert len(graphs) == graph_count


def test_merged_and_called_input_lists():
    def fn(x, left, right):
        return _merge(left, right)(x)

    relu, sigmoid, silu = torch.nn.ReLU(), torch.nn.Sigmoid(), torch.nn.SiLU()
    x = torch.randn(16)
    _compare_on_fresh_lists(fn, lambda: (x, Processors([relu, sigmoid]), Processors()), 1)
    _compare_on_fresh_lists(fn, lambda: (x, Processors([relu]), Processors([silu])), 1)


def test_mutations_replayed_on_the_same_object():
    def fn(a, b):
        a.extend(b)
        a.append_twice(b[0] + 1)
        a.append(a.length_times_10())
        return b

    compiled, graphs = counted_compile(fn, fullgraph=True)
    for f in (fn, compiled, compiled):
        x, y = torch.randn(3), torch.randn(3)
        items = Processors([x, y])
        out = f(items, items)
        assert out is items and type(items) is Processors
        assert len(items) == 7 and items[0] is x and items[2] is x and items[3] is y
        assert items[4] is items[5] and items[6] == 60
        assert_same(items[4], x + 1)
    assert len(graphs) == 1


def test_list_operations_on_an_input():
    def fn(items, x):
        total = sum(items)
        items.pop()
        items.insert(0, x * 2)
        items.reverse()
        return total, len(items), items[-1], type(items) is Processors, items[:1]

    a, b, x = torch.ones(2), torch.randn(2), torch.randn(2)
    _compare_on_fresh_lists(fn, lambda: (Processors([a, b]), x), 1)


def test_length_and_instance_attributes_are_guarded():
    def fn(items, x):
        return x * items.length_times_10()

    compiled, graphs = counted_compile(fn, fullgraph=True)
    x = torch.randn(2)
    short, long = Processors([1]), Processors([1, 2, 3])
    assert_same(compiled(short, x), fn(short, x))
    assert_same(compiled(long, x), fn(long, x))
    assert len(graphs) == 2
    shadowed = Processors([1])
    shadowed.length_times_10 = lambda: -1  # an instance attribute shadows the method
    assert_same(compiled(shadowed, x), fn(shadowed, x))  # (the guard on __dict__ failed)
    assert len(graphs) == 3
