"""config env overrides, log channels, and the backend registry."""

import os
import subprocess
import sys

import pytest

import kiln
from kiln import logs
from kiln.api import list_backends, lookup_backend, register_backend
from kiln.exc import KilnError


def _config_value(name, env):
    code = f"import kiln.config as c; print(repr(c.{name}))"
    out = subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_env_overrides_keep_the_type_of_the_default():
    assert _config_value("cache_size_limit", {"KILN_CACHE_SIZE_LIMIT": "3"}) == "3"
    assert _config_value("fallback_random", {"KILN_FALLBACK_RANDOM": "1"}) == "True"
    assert _config_value("fallback_random", {"KILN_FALLBACK_RANDOM": "off"}) == "False"
    assert _config_value("cache_dir", {"KILN_CACHE_DIR": "/tmp/x"}) == "'/tmp/x'"


def test_defaults():
    assert kiln.config.cache_size_limit == 8
    assert kiln.config.compiled_autograd is False


def test_log_channels_on_and_off(capsys):
    try:
        logs.set_logs("guards")
        assert logs.enabled("guards") and not logs.enabled("recompiles")
        logs.log("guards", "hello %s", "world")
        logs.log("recompiles", "hidden")
        err = capsys.readouterr().err
        assert "[kiln:guards] hello world" in err and "hidden" not in err
        logs.set_logs("compiled_autograd_verbose")
        assert logs.enabled("compiled_autograd")  # verbose implies the plain channel
        logs.set_logs("all")
        assert all(logs.enabled(c) for c in logs.CHANNELS)
    finally:
        logs.set_logs("")


def test_unknown_log_channel_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown KILN_LOGS channel.*nope"):
        logs.set_logs("guards,nope")


def test_registry_resolves_names_and_callables():
    assert lookup_backend("eager").__name__ == "eager_backend"

    def my_backend(gm, example_inputs):
        return gm.forward

    assert lookup_backend(my_backend) is my_backend
    register_backend("test_my_backend", my_backend)
    assert lookup_backend("test_my_backend") is my_backend
    assert {"eager", "aot_eager", "kiln", "test_my_backend"} <= set(list_backends())


def test_registry_decorator_forms():
    @register_backend
    def test_decorated(gm, example_inputs):
        return gm.forward

    @register_backend("test_named")
    def other(gm, example_inputs):
        return gm.forward

    assert lookup_backend("test_decorated") is test_decorated
    assert lookup_backend("test_named") is other


def test_unknown_backend_names_the_known_ones():
    with pytest.raises(KilnError, match="unknown backend 'nope'.*eager"):
        lookup_backend("nope")
