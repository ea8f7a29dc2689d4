"""The builtin setattr(obj, name, value) traced as `obj.name = value`, compared with eager."""

import torch
from frontend_helpers import run_and_compare


class _Box:
    pass


def test_setattr_on_new_objects_functions_and_inputs():
    def fn(x, box):
        def inner():
            pass

        setattr(inner, "__name__", "renamed")  # noqa: B010 (the builtin is what is tested)
        made = _Box()
        setattr(made, "value", x + 1)  # noqa: B010 (the builtin is what is tested)
        setattr(box, "count", 3)  # noqa: B010 (the builtin is what is tested)
        return inner.__name__, made.value, box.count

    run_and_compare(fn, torch.randn(3), _Box(), fullgraph=True, expected_breaks=0)


def test_setattr_with_a_non_string_name_raises_as_eager():
    def fn(x):
        try:
            setattr(_Box(), 1, x)
        except TypeError:
            return x + 1
        return x

    run_and_compare(fn, torch.randn(3))
