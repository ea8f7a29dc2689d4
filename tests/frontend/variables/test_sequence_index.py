"""`seq.index(x, start, stop)` of lists, tuples, torch.Size, deques and namedtuples made in the
frame: eager's answer (start/stop read as a slice's) and eager's ValueError."""

import collections

import pytest
import torch

import kiln

Four = collections.namedtuple("Four", "one two three four")

KINDS = {
    "list": lambda: [1, 2, 3, 4],
    "tuple": lambda: (1, 2, 3, 4),
    "size": lambda: torch.Size([1, 2, 3, 4]),
    "deque": lambda: collections.deque([1, 2, 3, 4]),
    "namedtuple": lambda: Four(1, 2, 3, 4),
}
BOUNDS = [(), (2,), (0, 3), (-2,), (1, -1), (-10, 10)]


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("bounds", BOUNDS)
def test_index_with_bounds_in_one_graph(kind, bounds):
    make = KINDS[kind]

    def fn(t):
        return t + make().index(3, *bounds)

    kiln.reset()
    x = torch.zeros(1)
    torch.testing.assert_close(kiln.compile(fn, backend="eager", fullgraph=True)(x), fn(x))


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("bounds", [(3,), (0, 2), (-1,)])
def test_index_outside_the_bounds_raises_value_error_as_eagerly(kind, bounds):
    make = KINDS[kind]

    def fn(t):
        return t + make().index(3, *bounds)

    with pytest.raises(ValueError) as eager:
        fn(torch.zeros(1))
    kiln.reset()
    with pytest.raises(ValueError) as compiled:
        kiln.compile(fn, backend="eager")(torch.zeros(1))
    assert str(compiled.value) == str(eager.value)
