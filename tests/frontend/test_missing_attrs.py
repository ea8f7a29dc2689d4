"""Missing attributes on tensors, modules and user objects: AttributeError raised in the traced
code as in eager (caught by try/except AttributeError, hasattr False, getattr's default),
without a graph break; guards on the dicts where the attribute could appear later."""

import torch
from frontend_helpers import run_and_compare

import kiln


class Plain:
    def __init__(self):
        self.a = 1


def catch_tensor(x):
    try:
        y = x.nope
    except AttributeError as e:
        return x + 1, str(e)
    return y


def catch_module(x, m):
    try:
        m.nope  # noqa: B018
    except AttributeError as e:
        return m(x) - 1, str(e)
    return x


def catch_user(x, u):
    try:
        u.nope  # noqa: B018
    except AttributeError as e:
        return x - 2, str(e)
    return x


def has_and_default(x, m, u):
    y = (x * 2).relu()
    return (
        hasattr(x, "nope"),
        hasattr(m, "nope"),
        hasattr(u, "nope"),
        getattr(y, "nope", 3),
        getattr(m, "nope", 4),
        getattr(u, "nope", 5),
        y + 1,
    )


def catch_parameter(x, m):
    try:
        m.weight.nope  # noqa: B018
    except AttributeError as e:
        return x + 3, str(e)
    return x


def uncaught(x, m):
    y = x + 1
    return m.nope + y


def test_tensor_missing_attribute_caught():
    run_and_compare(catch_tensor, torch.randn(3), expected_graphs=1, expected_breaks=0)


def test_module_missing_attribute_caught():
    m = torch.nn.Linear(3, 3)
    run_and_compare(catch_module, torch.randn(3), m, expected_graphs=1, expected_breaks=0)


def test_user_object_missing_attribute_caught():
    run_and_compare(catch_user, torch.randn(3), Plain(), expected_graphs=1, expected_breaks=0)


def test_parameter_missing_attribute_caught():
    m = torch.nn.Linear(3, 3)
    run_and_compare(catch_parameter, torch.randn(3), m, expected_graphs=1, expected_breaks=0)


def test_hasattr_and_getattr_default():
    m = torch.nn.Linear(3, 3)
    run_and_compare(
        has_and_default, torch.randn(3), m, Plain(), expected_graphs=1, expected_breaks=0
    )


def test_uncaught_missing_attribute_raises_as_eager():
    run_and_compare(uncaught, torch.randn(3), torch.nn.Linear(3, 3))  # AttributeError


def test_attribute_added_later_recompiles():
    def fn(x, m, t):
        try:
            t_extra = t.extra
        except AttributeError:
            t_extra = 0
        return x + getattr(m, "extra", 0) + t_extra + getattr(m, "bias2", 0)

    kiln.reset()
    m, t, x = torch.nn.Linear(3, 3), torch.randn(3), torch.randn(3)
    compiled = kiln.compile(fn, backend="eager")
    torch.testing.assert_close(compiled(x, m, t), fn(x, m, t))
    m.extra = 5
    torch.testing.assert_close(compiled(x, m, t), fn(x, m, t))
    t.extra = 7
    torch.testing.assert_close(compiled(x, m, t), fn(x, m, t))
    m.register_buffer("bias2", torch.ones(3))
    torch.testing.assert_close(compiled(x, m, t), fn(x, m, t))
    assert kiln.counters["stats"]["recompiles"] >= 2


def test_hasattr_sees_a_tensors_own_attributes():
    """hasattr on an input tensor reads its instance __dict__ too (guarded): an attribute set on
    the tensor later is seen, as in eager."""

    def fn(x, t):
        return x + (1 if hasattr(t, "extra") else 2) + (3 if hasattr(t, "shape") else 4)

    kiln.reset()
    x, t = torch.randn(3), torch.randn(3)
    compiled = kiln.compile(fn, backend="eager")
    torch.testing.assert_close(compiled(x, t), fn(x, t))
    t.extra = 1
    torch.testing.assert_close(compiled(x, t), fn(x, t))
    torch.testing.assert_close(compiled(x, t), x + 4)


Pair = __import__("collections").namedtuple("Pair", "a b")


def catch_builtin_values(x):
    """Values whose type has no instance attributes: the AttributeError is the type's answer."""
    messages = []
    for value in (frozenset((1, 2)), (1, 2), None, 3, "s", Pair(1, 2), [x], {"k": x}):
        try:
            value.add(1)
        except AttributeError as e:
            messages.append(str(e))
        try:
            getattr(value, "nope")  # noqa: B009 (the builtin, not LOAD_ATTR)
        except AttributeError as e:
            messages.append(str(e))
    return x + len(messages), messages


def test_builtin_values_missing_attribute_caught():
    run_and_compare(catch_builtin_values, torch.randn(3), fullgraph=True, expected_graphs=1)


def test_frozenset_mutation_raises_as_eager():
    def fn(x):
        s = frozenset((1, 2, 3))
        s.discard(2)
        return x + len(s)

    run_and_compare(fn, torch.randn(3))  # AttributeError, from eager's own frame
