"""A break inside a function wrapped by decorators of other modules (transformers' forwards:
`can_return_tuple` around `deprecate_kwarg`'s wrapper): the wrapper that is called at the break is
a closure with its own globals, compiled as a frame of its own, so the code under it is compiled
too (it ran in Python, uncompiled, before)."""

import torch

import kiln
from tests.frontend.frontend_helpers import run_and_compare

_DECORATORS = """
import functools

def {name}(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        kwargs.pop("unused", None)
        return func(*args, **kwargs)
    return wrapper
"""


def _decorator(name):
    """A decorator defined in globals of its own (as if imported from another module)."""
    namespace = {"__name__": f"lib_{name}"}
    exec(_DECORATORS.format(name=name), namespace)  # noqa: S102
    return namespace[name]


outer_library = _decorator("outer_library")
inner_library = _decorator("inner_library")


def data_sized(x):
    x = x.sin() * 2
    hits = (x > 0).nonzero()  # a break (data-dependent size)
    return x.cos() + hits.shape[0]


@outer_library
@inner_library
def forward(x):
    y = x + 1
    return data_sized(y) * 3


def test_code_under_a_library_closure_is_compiled():
    # the break is placed inside data_sized, through both wrappers (closures over cells of
    # functions from outside: Note [Nested breaks: placing the break in the callee]):
    # `x + 1, sin * 2 > 0` | `cos + n, * 3`, every op in a graph
    run_and_compare(forward, torch.randn(8))
    stats = kiln.counters["stats"]
    assert stats["unique_graphs"] == 2 and stats["calls_captured"] == 7, dict(stats)


def test_code_under_a_library_closure_is_compiled_as_its_own_frame(monkeypatch):
    monkeypatch.setattr(kiln.config, "nested_graph_breaks", False)
    run_and_compare(forward, torch.randn(8))
    # the graphs under the break: `x + 1`, `sin * 2 > 0`, `cos + n`, `* 3`
    assert kiln.counters["stats"]["unique_graphs"] >= 3, dict(kiln.counters["stats"])


def is_being_compiled():
    return torch.compiler.is_compiling()


def whole_frame_in_python(x, mask):
    try:
        kiln.graph_break()  # (a break inside try/except: the frame runs in Python)
    except RuntimeError:
        pass
    if mask is None and not is_being_compiled():  # (transformers' pattern)
        mask = torch.ones_like(x)
    return x.sin() * mask


def test_a_callee_that_only_asks_is_compiling_answers_as_eager():
    # the frame runs in Python and calls `is_being_compiled` as a compiled callee: a frame that
    # made no tensor op after asking `is_compiling()` runs as written, answering False as eager
    run_and_compare(whole_frame_in_python, torch.randn(3), None)
    # the function the user compiled still answers True, as under torch.compile
    assert kiln.compile(is_being_compiled, backend="eager")() is True


def test_subscripting_none_raises_type_error_as_eager():
    def catches(x, m):
        try:
            return m[0] + x
        except TypeError as e:
            return x * 2, str(e)

    run_and_compare(catches, torch.ones(2), None, fullgraph=True)
    run_and_compare(lambda x, m: x + m[0], torch.ones(2), None)  # (raised to the caller)
