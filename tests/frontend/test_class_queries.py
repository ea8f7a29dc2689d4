"""cls.__subclasses__() and `A | B` of classes, compiled vs eager (Notes [Classes: __subclasses__],
[Classes: unions of classes])."""

import torch
from frontend_helpers import run_and_compare

import kiln


def _family():
    class Base:
        pass

    class Left(Base):
        pass

    class Right(Base):
        pass

    class LeftChild(Left):
        pass

    return Base, Left, Right, LeftChild


def test_subclasses_of_a_closure_class_fold_to_the_live_list():
    base, left, right, _ = _family()

    def fn(x):
        subs = base.__subclasses__()
        return x + len(subs), subs

    out = run_and_compare(fn, torch.ones(2), fullgraph=True, expected_graphs=1)
    assert out(torch.ones(2))[1] == [left, right]


def test_subclasses_of_an_input_item():
    base, left, _, child = _family()

    def fn(x, classes):
        return x * 2, classes[0].__subclasses__()

    run_and_compare(fn, torch.ones(2), [left], fullgraph=True, expected_graphs=1)
    assert kiln.compile(fn, fullgraph=True)(torch.ones(2), [left])[1] == [child]


def test_a_subclass_defined_after_the_compile_is_seen():
    base, left, right, _ = _family()

    def fn():
        return base.__subclasses__()

    compiled = kiln.compile(fn, backend="eager", fullgraph=True)
    assert compiled() == [left, right]

    class Late(base):
        pass

    assert compiled() == fn() == [left, right, Late]


def test_subclasses_in_a_loop_over_the_tree():
    base, left, right, child = _family()

    def fn(x):
        seen = []
        todo = [base]
        while todo:
            cls = todo.pop()
            seen.append(cls.__name__)
            todo.extend(cls.__subclasses__())
        return x + len(seen), seen

    run_and_compare(fn, torch.ones(1), fullgraph=True, expected_graphs=1)


def test_union_of_classes_is_a_constant():
    from torch.distributed.tensor import Shard
    from torch.distributed.tensor.placement_types import _StridedShard

    def fn(x, p):
        kinds = Shard | _StridedShard
        opt = int | None
        return x + 1, kinds, kinds.__args__, isinstance(p, opt), opt.__args__

    run_and_compare(fn, torch.ones(2), 3, fullgraph=True, expected_graphs=1)
    run_and_compare(fn, torch.ones(2), "a", fullgraph=True, expected_graphs=1)


def test_union_of_user_classes_in_isinstance():
    base, left, right, _ = _family()

    def fn(x, obj):
        if isinstance(obj, left | right):
            return x + 1
        return x - 1

    run_and_compare(fn, torch.ones(2), left(), fullgraph=True, expected_graphs=1)
    run_and_compare(fn, torch.ones(2), base(), fullgraph=True, expected_graphs=1)


def test_union_with_generic_aliases_and_unions():
    def fn(x, items):
        def inner(y: torch.Tensor | list[int], z: None | list[str]):
            return y

        opt = int | str | list[int]  # (a union or'd again, a generic alias in it)
        return inner(x + 1, None), opt, opt.__args__, torch.Tensor | list[int], None | list[int]

    run_and_compare(fn, torch.ones(2), [1], fullgraph=True, expected_graphs=1)
