"""hasattr(module, name) compiled vs eager (Note [Objects: hasattr on a module])."""

import types

import torch
from frontend_helpers import CountingBackend, run_and_compare

import kiln

config_module = types.ModuleType("config_module")
config_module.scale = 3


def test_hasattr_on_torch_module_folds():
    def fn(x):
        if hasattr(torch.nn, "Module") and not hasattr(torch.nn, "NoSuchThing"):
            return x * x
        return x + 1

    run_and_compare(fn, torch.rand(4, 4), fullgraph=True, expected_graphs=1)


def test_hasattr_on_a_user_module_present_and_absent():
    def fn(x):
        out = x * config_module.scale if hasattr(config_module, "scale") else x
        if hasattr(config_module, "shift"):
            out = out + config_module.shift
        return out, getattr(config_module, "bias", -1.0)

    run_and_compare(fn, torch.ones(3), fullgraph=True, expected_graphs=1)


def test_an_attribute_defined_after_the_compile_recompiles():
    def fn(x):
        if hasattr(config_module, "late"):
            return x + config_module.late
        return x - 1

    backend = CountingBackend()
    compiled = kiln.compile(fn, backend=backend, fullgraph=True)
    x = torch.ones(2)
    torch.testing.assert_close(compiled(x), fn(x))
    config_module.late = 5
    try:
        torch.testing.assert_close(compiled(x), fn(x))
        config_module.late = 7  # (the value read is guarded as well)
        torch.testing.assert_close(compiled(x), fn(x))
    finally:
        del config_module.late
    torch.testing.assert_close(compiled(x), fn(x))
    assert backend.calls == 3
