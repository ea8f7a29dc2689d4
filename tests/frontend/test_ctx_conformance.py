"""Context managers and class attributes met in PyTorch's own frontend tests: grad-mode managers
kept as values across breaks, graphs of grad switches only, profilers, class-held tuples."""

import ctx_other_module
import torch
from frontend_helpers import CountingBackend, run_and_compare

import kiln


class Pair:
    _number_types = (int, float, complex)  # a tuple of types held by the class

    def __init__(self, value):
        self.value = value

    def is_number(self):
        return type(self.value) in self._number_types


def class_held_tuple_of_types(x):
    return x + 1 if Pair(3).is_number() else x - 1, Pair("s").is_number()


def test_class_held_tuple_of_types_is_read_in_one_graph():
    run_and_compare(class_held_tuple_of_types, torch.randn(3), fullgraph=True, expected_graphs=1)


def test_class_held_tuple_change_recompiles():
    backend = CountingBackend()
    f = kiln.compile(class_held_tuple_of_types, backend=backend)
    x = torch.randn(3)
    assert f(x)[1] is False
    old = Pair._number_types
    try:
        Pair._number_types = (int, str)
        out, is_num = f(x)
        assert is_num is True and torch.equal(out, x + 1)
    finally:
        Pair._number_types = old
    assert backend.calls == 2


def break_inside_nested_grad_modes(x):
    before = torch.is_grad_enabled()
    with torch.set_grad_enabled(False):
        kiln.graph_break()
        with torch.set_grad_enabled(True):
            x = torch.mul(x, 5)
            kiln.graph_break()
            x = torch.sqrt(x)
            assert torch.is_grad_enabled()
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled() == before
    return x, torch.is_grad_enabled()


def test_graph_of_grad_switches_only_goes_to_no_backend():
    # the part before the first break holds the with block's enter and exit only
    x = torch.rand(3, requires_grad=True)
    run_and_compare(break_inside_nested_grad_modes, x, expected_graphs=2)


def test_graph_of_grad_switches_only_still_leaves_the_mode():
    def fn(x):
        torch.set_grad_enabled(False)
        kiln.graph_break()
        return x * 2

    backend = CountingBackend()
    f = kiln.compile(fn, backend=backend)
    try:
        with torch.enable_grad():
            y = f(torch.rand(3, requires_grad=True))
            assert not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)
    assert not y.requires_grad
    assert backend.calls == 1


def profiled(x):
    y = x**2
    with torch.profiler.profile():
        y = y + 2
        with torch.autograd.profiler.profile(record_shapes=True):
            with torch.profiler.record_function("inner"):
                z = y**3
                z.tolist()  # a break
                z = z + 1
    return z


def test_profile_without_target_is_entered_as_nothing():
    x = torch.rand(2, 2, requires_grad=True)
    run_and_compare(profiled, x, expected_graphs=2)


def profiler_bound(x):
    with torch.profiler.profile() as p:
        y = x + 1
    return y, p.profiler is not None


def test_profile_bound_by_as_runs_in_python():
    run_and_compare(profiler_bound, torch.rand(2))


def profiler_with_callback(x, seen):
    with torch.profiler.profile(on_trace_ready=lambda prof: seen.append("ready")):
        y = x + 1
    return y


def test_profile_with_a_callback_runs_in_python():
    run_and_compare(profiler_with_callback, torch.rand(2), [])


def manager_made_before_a_break(x):
    x = x + 1
    ctx = torch.set_grad_enabled(True)
    kiln.graph_break()
    with ctx:
        x = x * 2
    return x, torch.is_grad_enabled()


def use_manager(x, ctx, y):
    with ctx:
        return x * y, torch.is_grad_enabled()


def manager_passed_with_a_break(x):
    x = x + 1
    return use_manager(x, torch.set_grad_enabled(True), kiln.graph_break() or 3)


def test_set_grad_enabled_object_lives_across_a_break():
    x = torch.rand(3, requires_grad=True)
    with torch.no_grad():  # the object switches grad mode on, and its exit switches it off
        run_and_compare(manager_made_before_a_break, x, expected_graphs=2)
        run_and_compare(manager_passed_with_a_break, x, expected_graphs=2)
    run_and_compare(manager_made_before_a_break, x, expected_graphs=2)


def reenter_after_switch(x):
    ctx = torch.set_grad_enabled(True)
    torch.set_grad_enabled(False)
    with ctx:  # __enter__ sets the object's mode again
        y = x * 2
    return y, torch.is_grad_enabled()


def test_set_grad_enabled_object_enter_sets_its_mode():
    x = torch.rand(3, requires_grad=True)
    try:
        run_and_compare(reenter_after_switch, x, expected_graphs=1)
    finally:
        torch.set_grad_enabled(True)


def bump_other_module(x):
    ctx_other_module.bump()
    with ctx_other_module.bumped(x) as y:
        z = y * ctx_other_module.counter
    return z + ctx_other_module.bump()


def test_globals_of_another_module_are_assigned_and_read_back():
    ctx_other_module.counter = 0
    x = torch.rand(3)
    expected = bump_other_module(x)
    assert ctx_other_module.counter == 13
    ctx_other_module.counter = 0
    backend = CountingBackend()
    got = kiln.compile(bump_other_module, backend=backend, fullgraph=True)(x)
    torch.testing.assert_close(got, expected)
    assert ctx_other_module.counter == 13
    assert backend.calls == 1


def chained_exceptions(t):
    v = ValueError(1, 2, 3)
    v.__context__ = TypeError("inner")
    w = KeyError("k")
    suppressed_before = w.__suppress_context__
    w.__cause__ = v
    return t.sin(), v, w, suppressed_before, w.__suppress_context__, w.__cause__ is v


def test_exception_with_context_and_cause_is_returned():
    x = torch.randn(2)
    expected = chained_exceptions(x)
    got = kiln.compile(chained_exceptions, fullgraph=True)(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[3:] == expected[3:] == (False, True, True)
    v, w = got[1], got[2]
    assert type(v) is ValueError and v.args == (1, 2, 3)
    assert type(v.__context__) is TypeError and v.__context__.args == ("inner",)
    assert w.__cause__ is v and w.__suppress_context__ and w.__traceback__ is None


class AliasingModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_parameter("a", torch.nn.Parameter(torch.ones(4) * 2))
        self.lin = torch.nn.Linear(4, 4)

    def __getattr__(self, name):
        if name == "lin":  # the module's own __getattr__ answers for a submodule too
            return 7
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "a_copy":
                return self.a
            raise

    def forward(self, x):
        return x * self.a * self.a_copy * self.lin, hasattr(self, "missing")


def test_module_with_its_own_getattr_is_traced():
    mod = AliasingModule()
    x = torch.rand(4)
    expected = mod(x)
    backend = CountingBackend()
    got = kiln.compile(mod, backend=backend, fullgraph=True)(x)
    torch.testing.assert_close(got[0], expected[0])
    assert got[1] is expected[1] is False
    assert backend.calls == 1
