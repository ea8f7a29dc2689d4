"""Code cache: C++ source hash (+ flags, compiler, CPU) → shared object, in memory and on disk.

Writes are atomic (compile to a unique temporary name, then os.replace), so concurrent processes
sharing `config.cache_dir` never see a partial file and a second process compiles nothing. Whole
compiled graphs (wrapper source + kernel key) are cached the same way, keyed by the graph and its
inputs' metadata, so that a warm start skips lowering too.
"""

import ctypes
import json
import os
import tempfile

import torch

from kiln import config, faults, logs, toolchain
from kiln.toolchain import CompilerError, cpp_key  # noqa: F401 (the backend's names for them)

_libraries = {}  # .so path -> ctypes.CDLL
_graphs = {}  # graph key -> payload dict


def compile_cpp(source, extra_flags=(), kind="cpp"):
    """Path of the shared object for source, compiling it only if no process has yet (the
    `cpp_compile` fault point, then kiln/toolchain.py)."""
    faults.hit("cpp_compile")
    return toolchain.compile_cpp(source, extra_flags, kind)


def num_threads():
    """OpenMP threads for kernels."""
    return config.num_threads or torch.get_num_threads()


def load_library(path):
    """The loaded shared object (once per process)."""
    lib = _libraries.get(path)
    if lib is None:
        lib = ctypes.CDLL(path)
        lib.kiln_set_num_threads.argtypes = [ctypes.c_int]
        lib.kiln_set_num_threads(num_threads())
        _libraries[path] = lib
    return lib


def graph_get(key):
    """A cached compiled graph payload ({"wrapper": src, "cpp": src}) or None."""
    p = _graphs.get(key)
    if p is not None:
        return p
    path = os.path.join(toolchain.cache_subdir("graphs"), f"{key}.json")
    try:
        with open(path) as f:
            p = json.load(f)
    except (OSError, ValueError):
        return None
    _graphs[key] = p
    logs.counters["backend"]["graph_disk_hits"] += 1
    return p


def graph_put(key, payload, disk=True):
    """Store a compiled graph payload in memory and (if serializable) on disk, atomically."""
    _graphs[key] = payload
    if not disk:
        return
    d = toolchain.cache_subdir("graphs")
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=d)
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f)
    os.replace(tmp, os.path.join(d, f"{key}.json"))


def clear_memory_cache():
    """Forget in-memory graphs (tests use it to exercise the disk cache)."""
    _graphs.clear()
