"""Generators whose consumer writes what they read: stepped to each yield (Note [Generators:
lazy]), they read it after the write, as in eager, and the loop stays compiled."""

import torch
from frontend_helpers import run_and_compare

import kiln

G = [1, 2]


def loop_grows_the_list_the_generator_reads(x):
    lst = [1, 2]
    out = []
    for v in (lst[-1] + k for k in range(3)):
        lst.append(v)  # eager's next item reads the grown list
        out.append(v)
    return x + sum(out), out


def loop_writes_a_global_the_generator_reads(x):
    out = []
    for v in (G[-1] + k for k in range(3)):
        G.append(v)
        out.append(v)
    return x + sum(out), out


def loop_writes_elsewhere(x):
    scale = [2.0]
    out = []
    for v in (x * scale[0] + k for k in range(3)):
        out.append(v.sum())  # the generator never reads `out`
    return torch.stack(out)


def next_after_a_write(x):
    lst = [1]
    gen = (lst[-1] + k for k in range(2))
    a = next(gen)
    lst.append(10)
    return x + a + next(gen)


def test_a_write_the_generator_reads_is_seen_by_its_next_item():
    run_and_compare(
        loop_grows_the_list_the_generator_reads,
        torch.zeros(1),
        expected_graphs=1,
        expected_breaks=0,
    )


def test_a_global_written_by_the_consumer():
    global G
    kiln.reset()
    eager_g, G = None, [1, 2]
    want = loop_writes_a_global_the_generator_reads(torch.zeros(1))
    eager_g, G = G, [1, 2]
    got = kiln.compile(loop_writes_a_global_the_generator_reads)(torch.zeros(1))
    torch.testing.assert_close(got[0], want[0])
    assert got[1] == want[1] and G == eager_g


def test_next_after_a_write():
    run_and_compare(next_after_a_write, torch.zeros(1))


def test_writes_elsewhere_stay_compiled():
    run_and_compare(loop_writes_elsewhere, torch.randn(3), expected_graphs=1, expected_breaks=0)
