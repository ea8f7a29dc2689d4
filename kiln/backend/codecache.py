"""Code cache: C++ source hash (+ flags, compiler, CPU) → shared object, in memory and on disk.

Writes are atomic (compile to a unique temporary name, then os.replace), so concurrent processes
sharing `config.cache_dir` never see a partial file and a second process compiles nothing. Whole
compiled graphs (wrapper source + kernel key) are cached the same way, keyed by the graph and its
inputs' metadata, so that a warm start skips lowering too.
"""

import ctypes
import functools
import hashlib
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time

import torch

from kiln import config, faults, logs

_libraries = {}  # .so path -> ctypes.CDLL
_graphs = {}  # graph key -> payload dict


class CompilerError(RuntimeError):
    """The C++ compiler is missing or rejected the generated code."""


def _flags():
    extra = "-fwrapv -fno-math-errno"  # eager semantics for int overflow; errno is unobservable
    return f"{config.cpp_flags} {extra}".split()


@functools.lru_cache(None)
def _compiler_id(compiler):
    path = shutil.which(compiler)
    if path is None:
        raise CompilerError(
            f"C++ compiler {compiler!r} not found (set kiln.config.cpp_compiler or "
            f"KILN_CPP_COMPILER)"
        )
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as e:
        raise CompilerError(f"C++ compiler {compiler!r} cannot run: {e}") from e
    return out.stdout.splitlines()[0] if out.stdout else path


@functools.lru_cache(None)
def _cpu_id():
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        model = next((ln for ln in text.splitlines() if ln.startswith("model name")), "")
        flags = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
        return hashlib.sha256((model + flags).encode()).hexdigest()[:16]
    except OSError:
        return platform.machine()


def cpp_key(source, extra_flags=()):
    """The cache key of a translation unit."""
    comp = config.cpp_compiler
    h = hashlib.sha256()
    flags = " ".join([*_flags(), *extra_flags])
    for part in (source, comp, flags, _compiler_id(comp), _cpu_id()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def _dir(kind):
    d = os.path.join(config.cache_dir, kind)
    os.makedirs(d, exist_ok=True)
    return d


def compile_cpp(source, extra_flags=(), kind="cpp"):
    """Path of the shared object for source, compiling it only if no process has yet; `kind`
    names its counters (`cpp_compiles`, `cpp_disk_hits`)."""
    faults.hit("cpp_compile")
    key = cpp_key(source, extra_flags)
    so = os.path.join(_dir("cpp"), f"{key}.so")
    if os.path.exists(so):
        logs.counters["backend"][f"{kind}_disk_hits"] += 1
        return so
    src = os.path.join(_dir("cpp"), f"{key}.cpp")
    fd, tmp_src = tempfile.mkstemp(suffix=".cpp", dir=os.path.dirname(src))
    with os.fdopen(fd, "w") as f:
        f.write(source)
    os.replace(tmp_src, src)
    tmp_so = f"{so}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    cmd = [config.cpp_compiler, *_flags(), *extra_flags, src, "-o", tmp_so]
    t0 = time.perf_counter()
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except FileNotFoundError as e:
        raise CompilerError(f"C++ compiler {config.cpp_compiler!r} not found: {e}") from e
    if res.returncode != 0:
        raise CompilerError(f"C++ compilation failed ({' '.join(cmd)}):\n{res.stderr[-4000:]}")
    os.replace(tmp_so, so)
    logs.counters["backend"][f"{kind}_compiles"] += 1
    logs.log("output_code", "compiled %s in %.2fs", so, time.perf_counter() - t0)
    return so


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
    path = os.path.join(_dir("graphs"), f"{key}.json")
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
    d = _dir("graphs")
    fd, tmp = tempfile.mkstemp(suffix=".tmp", dir=d)
    with os.fdopen(fd, "w") as f:
        json.dump(payload, f)
    os.replace(tmp, os.path.join(d, f"{key}.json"))


def clear_memory_cache():
    """Forget in-memory graphs (tests use it to exercise the disk cache)."""
    _graphs.clear()
