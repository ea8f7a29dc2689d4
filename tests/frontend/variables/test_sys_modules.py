"""sys.modules read by name in compiled code (Note [Modules: sys.modules by name]): answers as
eager's, guarded on the names read only, so an unrelated import does not recompile."""

import sys
import types

import torch

import kiln

NAME = "kiln_test_sys_modules_probe"


def lookups(x):
    present = NAME in sys.modules
    got = sys.modules.get(NAME, None)
    mod = sys.modules["math"]
    return x + mod.sqrt(4) + present, got is None


def missing_item(x):
    try:
        sys.modules[NAME]
    except KeyError as e:
        return x + 1, e.args
    return x, ()


def counting():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return graphs, backend


def test_reads_by_name_match_eager_as_modules_come_and_go():
    kiln.reset()
    graphs, backend = counting()
    compiled = kiln.compile(lookups, backend=backend)
    x = torch.ones(2)
    try:
        for present in (False, True, False):
            if present:
                sys.modules[NAME] = types.ModuleType(NAME)
            else:
                sys.modules.pop(NAME, None)
            got, eager = compiled(x), lookups(x)
            torch.testing.assert_close(got[0], eager[0])
            assert got[1] == eager[1] == (not present)
    finally:
        sys.modules.pop(NAME, None)
    assert len(graphs) == 2  # one per state of the name read


def test_an_unrelated_import_does_not_recompile():
    kiln.reset()
    graphs, backend = counting()
    compiled = kiln.compile(lookups, backend=backend)
    x = torch.ones(2)
    compiled(x)
    other = NAME + "_other"
    sys.modules[other] = types.ModuleType(other)
    try:
        torch.testing.assert_close(compiled(x)[0], lookups(x)[0])
    finally:
        del sys.modules[other]
    assert len(graphs) == 1


def test_a_missing_name_raises_key_error():
    sys.modules.pop(NAME, None)
    compiled = kiln.compile(missing_item, backend="eager")
    got, eager = compiled(torch.ones(2)), missing_item(torch.ones(2))
    torch.testing.assert_close(got[0], eager[0])
    assert got[1] == eager[1] == (NAME,)


def count_modules(x):
    return x + 1, len(sys.modules), sum(1 for _ in sys.modules.items())


def test_other_uses_run_in_python():
    compiled = kiln.compile(count_modules, backend="eager")
    got, eager = compiled(torch.ones(2)), count_modules(torch.ones(2))
    torch.testing.assert_close(got[0], eager[0])
    assert got[1:] == eager[1:]
