"""Guards read an object's namespace without running its class's Python __getattribute__
(Note [Guards: plain reads skip a Python __getattribute__]), and still catch every change."""

import weakref

import torch

import kiln
from tests.frontend.frontend_helpers import CountingBackend


class Config:
    """A config whose attribute reads go through a Python hook (as Hugging Face's do)."""

    aliases = {}
    scale = 2.0

    def __getattribute__(self, key):
        if key != "aliases" and key in super().__getattribute__("aliases"):
            key = super().__getattribute__("aliases")[key]
        return super().__getattribute__(key)


def _setup():
    cfg = Config()
    cfg.width = 3

    def f(x):
        return x * cfg.width + cfg.scale

    backend = CountingBackend()
    return cfg, f, kiln.compile(f, backend=backend), backend


def test_guard_reads_the_namespace_plainly():
    cfg, f, cf, _ = _setup()
    x = torch.randn(4)
    torch.testing.assert_close(cf(x), f(x))
    src = cf._kiln_cache.entry_info[0].guard_source
    assert ".__dict__" not in src and ".aliases" not in src, src
    assert "___plain_attr(" in src and "'__dict__'" in src and "'aliases'" in src, src


def test_instance_attribute_change_recompiles():
    cfg, f, cf, backend = _setup()
    x = torch.randn(4)
    cf(x)
    cfg.width = 5
    torch.testing.assert_close(cf(x), f(x))
    assert backend.calls == 2


def test_class_attribute_change_recompiles():
    cfg, f, cf, backend = _setup()
    x = torch.randn(4)
    cf(x)
    Config.scale = 7.0
    try:
        torch.testing.assert_close(cf(x), f(x))
    finally:
        Config.scale = 2.0
    assert backend.calls == 2


def test_instance_attribute_shadowing_the_class_one_recompiles():
    cfg, f, cf, backend = _setup()
    x = torch.randn(4)
    cf(x)
    cfg.scale = -1.0
    torch.testing.assert_close(cf(x), f(x))
    assert backend.calls == 2


def test_alias_added_to_the_hook_table_recompiles():
    cfg, f, cf, backend = _setup()
    x = torch.randn(4)
    cf(x)
    cfg.aliases = {"width": "other"}  # the hook now reads cfg.other for cfg.width
    cfg.other = 10
    torch.testing.assert_close(cf(x), f(x))
    assert backend.calls == 2
    del cfg.aliases


class Scaled(Config):
    def apply(self, x):
        return x * self.width


class Shifted(Config):
    def apply(self, x):
        return x - self.width


def test_class_of_a_hooked_object_is_its_type_and_a_new_class_recompiles():
    cfg = Scaled()
    cfg.width = 3

    def f(x):
        return cfg.apply(x) + 1

    backend = CountingBackend()
    cf = kiln.compile(f, backend=backend)
    x = torch.randn(4)
    torch.testing.assert_close(cf(x), f(x))
    src = cf._kiln_cache.entry_info[0].guard_source
    assert ".__class__" not in src and "___type(" in src, src
    cfg.__class__ = Shifted
    torch.testing.assert_close(cf(x), f(x))
    assert backend.calls == 2


def test_weakref_proxy_class_is_read_as_python_reads_it():
    class Box:
        def get(self, x):
            return x + 2

    box = Box()
    proxy = weakref.proxy(box)

    def f(x):
        return proxy.get(x)

    cf = kiln.compile(f, backend=CountingBackend())
    x = torch.randn(4)
    torch.testing.assert_close(cf(x), f(x))
    torch.testing.assert_close(cf(x), f(x))
