"""Regressions found by the conformance runs (benchmarks/cpython_conformance.py,
benchmarks/dynamo_conformance.py): each compiled function must return what eager Python returns."""

import typing
from contextlib import closing, contextmanager

import torch
from frontend_helpers import run_and_compare

import kiln

DottedName = type("typing.io", (), {})  # a type whose __name__ is not an identifier


def guard_on_type_with_dotted_name(x, obj):
    return x + 1 if isinstance(obj, DottedName) else x - 1


def test_guard_on_type_whose_name_is_not_an_identifier():
    run_and_compare(guard_on_type_with_dotted_name, torch.randn(3), DottedName())


def raise_after_catching(flag):
    try:
        raise KeyError("first")
    except KeyError as exc:
        caught = exc
    context = caught.__context__
    if flag:
        raise ValueError("boom")
    return context


def context_of_the_error_raised_in_a_fallen_back_frame():
    try:
        raise_after_catching(True)
    except ValueError as err:
        # returning the raised error breaks the graph and runs the frame eagerly: the error raised
        # there must not get kiln's Unsupported as its __context__
        return err


def test_frame_run_eagerly_after_a_break_leaves_no_exception_context():
    eager = context_of_the_error_raised_in_a_fallen_back_frame()
    compiled = kiln.compile(context_of_the_error_raised_in_a_fallen_back_frame, backend="eager")()
    assert repr(compiled) == repr(eager)
    assert repr(compiled.__context__) == repr(eager.__context__) == "None"


def generator_kept_across_a_call(x):
    def gen():
        yield x + 1
        yield x + 2

    g = gen()
    first = next(g)
    kiln.graph_break()
    rest = list(g)
    g.close()  # a generator object still, after the graph break rebuilt it
    return first, rest, type(g).__name__


def test_generator_object_stays_a_generator():
    run_and_compare(generator_kept_across_a_call, torch.randn(2))


@contextmanager
def _traps_runtime_error():
    try:
        yield
    except RuntimeError:
        raise SyntaxError("from the generator") from None


def contextmanager_entered_by_hand(x):
    ctx = _traps_runtime_error()
    ctx.__enter__()  # (a break: the manager is rebuilt once, for the local and the call alike)
    try:
        ctx.__exit__(RuntimeError, None, None)
    except SyntaxError as e:
        return x + 1, str(e)
    return x - 1, "not raised"


def test_contextmanager_entered_by_hand_is_one_object():
    run_and_compare(contextmanager_entered_by_hand, torch.randn(2))


@contextmanager
def _takes_a_and_b(a, *, b):
    yield a + b


def contextmanager_called_with_wrong_arguments(x):
    try:
        _takes_a_and_b(x)
    except TypeError:
        return x + 1
    return x - 1


def test_contextmanager_called_with_wrong_arguments_raises():
    run_and_compare(contextmanager_called_with_wrong_arguments, torch.randn(2))


def local_class_method_appends_to_frame_list(x):
    state = []

    class Closer:
        def close(self):
            state.append(1)

    with closing(Closer()):
        y = x + 1
    return y, state


def test_local_class_closing_over_a_frame_list_shares_it():
    # (one call: each call makes a new class, which the resumed code's guards see as new)
    run_and_compare(local_class_method_appends_to_frame_list, torch.randn(2), calls=1)


class _Base:
    def f(self):
        return "base"


class _ClassAttrOverride(_Base):
    __class__ = 413  # a class attribute named __class__ shadows the object's type

    def f(self):
        return super().f()


def class_attribute_named_class(x):
    obj = _ClassAttrOverride()
    return x + 1, obj.__class__, obj.f()


def test_class_attribute_named_class():
    run_and_compare(class_attribute_named_class, torch.randn(2))


def super_with_bad_arguments(x):
    try:
        super(1, int)
    except TypeError as e:
        first = str(e)
    try:
        super(_ClassAttrOverride, _Base())
    except TypeError as e:
        second = str(e)
    return x + 1, first, second


def test_super_with_bad_arguments_raises():
    run_and_compare(super_with_bad_arguments, torch.randn(2))


class _Child(_Base):
    def f(self):
        return "child+" + super(_Child, self).f()  # noqa: UP008 (the two-argument form)

    @classmethod
    def name(cls):
        return super(_Child, cls).__name__  # noqa: UP008


def super_forms(x):
    c = _Child()
    return x + 1, c.f(), super(_Child, c).f()


def test_two_argument_super_still_captured():
    run_and_compare(super_forms, torch.randn(2), expected_graphs=1)


def typing_generics_at_run_time(x):
    # (the typing module's generics on purpose: what older model code writes)
    a = typing.List[int]  # noqa: UP006
    b = typing.Dict[str, typing.List[int]]  # noqa: UP006
    c = typing.Optional[torch.Tensor]  # noqa: UP045
    d = typing.Tuple[int, ...]  # noqa: UP006
    e = list[int]
    return x + 1, a, b, c, d, e


def test_typing_generics_subscripted_in_the_frame_are_captured():
    run_and_compare(typing_generics_at_run_time, torch.randn(2), fullgraph=True, expected_graphs=1)


def tuples_and_lists_added_to_constants(x, y):
    out = (x, y)
    out = () + out + ()
    padded = (None,) + out + (1,)
    return out, padded, [x] + [], x.shape + (1,)


def test_traced_tuple_plus_constant_tuple_is_captured():
    run_and_compare(
        tuples_and_lists_added_to_constants,
        torch.randn(2),
        torch.randn(2),
        fullgraph=True,
    )


def tensor_class_name(x):
    return x + 1, f"{x.__class__.__name__} foo", x.__class__ is torch.Tensor


def test_tensor_class_attribute_is_captured():
    run_and_compare(tensor_class_name, torch.randn(2), fullgraph=True, expected_graphs=1)
    run_and_compare(tensor_class_name, torch.nn.Parameter(torch.randn(2)), fullgraph=True)


# --- Note [Generators: effects outside]: a generator stopped early makes only some writes ----------
def walrus_in_genexp_any(x):
    last = None
    found = any((last := n) == 1 for n in [1, 2, 3])  # eager stops at the first item
    return x + 1, found, last


def append_in_genexp_all(x):
    out = []
    ok = all(out.append(n) or n < 2 for n in range(5))  # eager stops at n == 2
    return x * 2, ok, out


def pure_genexp_summed(x):
    return sum(x * i for i in range(3))


def test_generator_writing_outside_itself_runs_lazily():
    for fn in (walrus_in_genexp_any, append_in_genexp_all):
        # stepped by any()/all() one item at a time (Note [Generators: lazy]): captured
        run_and_compare(fn, torch.ones(2), expected_graphs=1, expected_breaks=0)


def test_generator_without_outside_writes_stays_in_the_graph():
    kiln.reset()
    run_and_compare(pure_genexp_summed, torch.ones(2))
    assert kiln.counters["stats"]["graph_breaks"] == 0
