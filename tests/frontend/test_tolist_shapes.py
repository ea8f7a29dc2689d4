"""`t.tolist()` of a 0-d or many-d tensor under capture_scalar_outputs: eager's nested lists."""

import pytest
import torch

import kiln
from kiln.exc import Unsupported


@pytest.fixture
def capture(monkeypatch):
    monkeypatch.setattr(kiln.config, "capture_scalar_outputs", True)


def test_tolist_of_a_0d_tensor_is_the_scalar(capture):
    def fn(x):
        v = x.tolist()
        return [v * 3, v + 1]

    x = torch.tensor(7)
    assert kiln.compile(fn, backend="eager", fullgraph=True)(x) == fn(x)


def test_tolist_of_a_3d_tensor_is_nested_lists(capture):
    def fn(x):
        rows = x.tolist()
        return [[[v * 2 for v in inner] for inner in row] for row in rows], len(rows[0])

    x = torch.arange(12).reshape(2, 3, 2)
    assert kiln.compile(fn, backend="eager", fullgraph=True)(x) == fn(x)


def test_tolist_of_many_elements_is_a_break(capture):
    def fn(x):
        return x.tolist()

    with pytest.raises(Unsupported):
        kiln.compile(fn, backend="eager", fullgraph=True)(torch.zeros(40, 40, dtype=torch.int64))
