"""Backend tests share one kernel cache directory per test session (g++ runs once per source)."""

import os

import pytest
import torch

from kiln import config

# Triton kernels on CPU tensors run in Triton's interpreter (read when triton is imported)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True, scope="session")
def _kiln_cache_dir(tmp_path_factory):
    old = config.cache_dir
    config.cache_dir = str(tmp_path_factory.mktemp("kiln_cache"))
    yield
    config.cache_dir = old


@pytest.fixture(autouse=True)
def _seed():
    import torch

    torch.manual_seed(0)
