"""kiln.disable's forms: a module (a DisabledModule) or a module class (they run in Python with
their hooks; compiled callers break the graph there), recursive=False (the function runs in
Python, the user functions it calls are compiled), and kiln.compile of a module class; results
equal eager's."""

import functools
import operator

import torch

import kiln


class Recording:
    """A backend that keeps the graphs it compiles and runs them as they are."""

    def __init__(self):
        self.graphs = []

    def __call__(self, gm, example_inputs):
        self.graphs.append(gm)
        return gm.forward

    def targets(self, i):
        return {n.target for n in self.graphs[i].graph.nodes if n.op == "call_function"}


class Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(torch.tanh(x))


class Outer(torch.nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
        self.out = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.out(self.inner(torch.cos(x)) * 2)


def _doubled(mod, args):
    return (args[0] * 2,)


def test_disabled_module_instance_runs_in_python_with_its_hooks():
    torch.manual_seed(0)
    model = Outer(Inner())
    model.inner.register_forward_pre_hook(_doubled)
    x = torch.randn(3, 4)
    expected = model(x)
    model.inner = kiln.disable(model.inner)  # still a module: it can be a child
    assert isinstance(model.inner, torch.nn.Module)
    assert kiln.disable(model.inner) is model.inner
    be = Recording()
    torch.testing.assert_close(kiln.compile(model, backend=be)(x), expected)
    assert len(be.graphs) == 2  # before and after the disabled call
    assert torch.cos in be.targets(0) and torch.tanh not in be.targets(0)
    assert all(torch.tanh not in be.targets(i) for i in range(2))
    assert dict(model.state_dict()).keys() == dict(Outer(Inner()).state_dict()).keys()


def test_disabled_module_class_and_compiled_module_class():
    @kiln.disable
    class KeptOut(Inner):
        pass

    be = Recording()

    @kiln.compile(backend=be)
    class Compiled(Outer):
        pass

    torch.manual_seed(0)
    model = Compiled(KeptOut())
    model.inner.register_forward_pre_hook(_doubled)
    x = torch.randn(3, 4)
    out = model(x)
    assert len(be.graphs) == 2
    assert all(torch.tanh not in be.targets(i) for i in range(2))
    ref = Outer(Inner())
    ref.load_state_dict(model.state_dict())
    ref.inner.register_forward_pre_hook(_doubled)
    torch.testing.assert_close(out, ref(x))
    assert kiln.compile(KeptOut()).forward.__func__ is Inner.forward  # left uncompiled


def _leaf(x):
    return torch.sin(x) * 3


@kiln.disable(recursive=False)
def _shallow(x):
    y = torch.sigmoid(x)  # in Python
    return _leaf(y.cos())  # a compiled frame


def _calls_shallow(x):
    return _shallow(torch.tan(x)) + 1


def test_disable_not_recursive_compiles_the_callees():
    be = Recording()
    x = torch.randn(5)
    torch.testing.assert_close(kiln.compile(_calls_shallow, backend=be)(x), _calls_shallow(x))
    graph_targets = [be.targets(i) for i in range(len(be.graphs))]
    assert any(torch.tan in t for t in graph_targets)
    assert any(torch.sin in t for t in graph_targets)  # _leaf compiled
    assert all(torch.sigmoid not in t for t in graph_targets)  # _shallow's own code ran in Python


def test_disable_not_recursive_compiled_directly_and_called_eagerly():
    be = Recording()
    x = torch.randn(5)
    torch.testing.assert_close(kiln.compile(_shallow, backend=be)(x), _shallow(x))
    assert [torch.sin in be.targets(i) for i in range(len(be.graphs))] == [True]
    before = len(be.graphs)
    torch.testing.assert_close(_shallow(x), _leaf(torch.sigmoid(x).cos()))  # plain call: eager
    assert len(be.graphs) == before
    kiln.reset()
    torch.testing.assert_close(kiln.compile(_calls_shallow, backend=be)(x), _calls_shallow(x))
    assert all(torch.sigmoid not in be.targets(i) for i in range(len(be.graphs)))


def _plus_two(x):
    return x + 2


def _times_three(x):
    return x * 3


def _calls_given(f, x):
    return f(x) + 1


def test_disabled_function_argument_is_guarded_by_identity():
    # the frame traced with a disabled function breaks there and calls it; called next with
    # another function, that entry must not run (the other function is traced)
    be = Recording()
    x = torch.randn(5)
    compiled = kiln.compile(_calls_given, backend=be)
    shallow = kiln.disable(_plus_two, recursive=False)
    torch.testing.assert_close(compiled(shallow, x), _calls_given(shallow, x))
    torch.testing.assert_close(compiled(_times_three, x), _calls_given(_times_three, x))
    assert operator.mul in be.targets(len(be.graphs) - 1)  # _times_three traced
    torch.testing.assert_close(compiled(shallow, x), _calls_given(shallow, x))


class _Shifter:
    def __init__(self, k):
        self.k = k

    def shift(self, x):
        y = torch.sigmoid(x) + self.k  # in Python
        return _leaf(y)  # a compiled frame


def test_disable_not_recursive_on_a_bound_method():
    be = Recording()
    x = torch.randn(5)
    obj = _Shifter(2.0)
    obj.shift = kiln.disable(obj.shift, recursive=False)

    def calls_method(x):
        return obj.shift(torch.tan(x)) + 1

    torch.testing.assert_close(kiln.compile(calls_method, backend=be)(x), calls_method(x))
    graph_targets = [be.targets(i) for i in range(len(be.graphs))]
    assert any(torch.sin in t for t in graph_targets)  # _leaf compiled
    assert all(torch.sigmoid not in t for t in graph_targets)  # the method's own code in Python
    torch.testing.assert_close(kiln.compile(obj.shift, backend=be)(x), _Shifter(2.0).shift(x))


def test_disable_not_recursive_on_a_module():
    be = Recording()
    x = torch.randn(2, 4)
    inner = Inner()
    call_inner = kiln.disable(inner, recursive=False)  # a function: it runs, the module compiles

    def calls_module(x):
        return call_inner(x.cos()) * 2

    torch.testing.assert_close(kiln.compile(calls_module, backend=be)(x), calls_module(x))
    assert any(torch.tanh in be.targets(i) for i in range(len(be.graphs)))  # Inner compiled


@kiln.disable
def _kept_out(x):
    return x + 1


@functools.wraps(_kept_out)  # (copies _kept_out's __dict__, kiln's marks included)
def _users_wrapper(x):
    return _kept_out(torch.cos(x)) * 2


def test_a_users_functools_wraps_of_a_disabled_function_is_traced():
    be = Recording()
    x = torch.randn(5)
    torch.testing.assert_close(kiln.compile(_users_wrapper, backend=be)(x), _users_wrapper(x))
    graph_targets = set().union(*[be.targets(i) for i in range(len(be.graphs))])
    assert torch.cos in graph_targets  # the wrapper's own code compiled; _kept_out broke
