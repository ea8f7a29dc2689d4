"""README documents every KILN_* setting and every log channel."""

import pathlib
import types

from kiln import config, logs

README = (pathlib.Path(__file__).resolve().parents[2] / "README.md").read_text()


def _settings():
    return [
        name
        for name, value in vars(config).items()
        if not name.startswith("_")
        and not callable(value)
        and not isinstance(value, types.ModuleType)
    ]


def test_every_setting_has_its_variable_in_the_readme():
    missing = [f"KILN_{n.upper()}" for n in _settings() if f"`KILN_{n.upper()}`" not in README]
    assert not missing, f"add these to README's settings table: {missing}"


def test_every_log_channel_is_in_the_readme():
    missing = [c for c in logs.CHANNELS if f"`{c}`" not in README]
    assert not missing, f"add these to README's KILN_LOGS table: {missing}"
