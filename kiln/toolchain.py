"""The C++ toolchain: compile one translation unit to a shared object, once per machine.

A shared object is named by the hash of its source, flags, compiler and CPU (`cpp_key`) and kept
under `config.cache_dir`/cpp. Writes are atomic (compile to a unique temporary name, then
os.replace), so concurrent processes never see a partial file and a second process compiles
nothing. The backend's kernels (backend/codecache.py) and the guards' C++ tensor checks
(frontend/tensor_match.py) are built here.
"""

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import platform
import shutil
import subprocess
import tempfile
import threading
import time

from kiln import config, logs


class CompilerError(RuntimeError):
    """The C++ compiler is missing or rejected the generated code."""


def flags():
    extra = "-fwrapv -fno-math-errno"  # eager semantics for int overflow; errno is unobservable
    return f"{config.cpp_flags} {extra}".split()


@functools.lru_cache(None)
def compiler_id(compiler):
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
def cpu_id():
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        model = next((ln for ln in text.splitlines() if ln.startswith("model name")), "")
        flags = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
        return hashlib.sha256((model + flags).encode()).hexdigest()[:16]
    except OSError:
        return platform.machine()


def cpp_key(source, extra_flags=(), libraries=()):
    """The cache key of a translation unit."""
    comp = config.cpp_compiler
    h = hashlib.sha256()
    text = " ".join([*flags(), *extra_flags, *libraries])
    for part in (source, comp, text, compiler_id(comp), cpu_id()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:40]


def cache_subdir(kind):
    d = os.path.join(config.cache_dir, kind)
    os.makedirs(d, exist_ok=True)
    return d


def compile_cpp(source, extra_flags=(), kind="cpp", libraries=()):
    """Path of the shared object for source, compiling it only if no process has yet; `kind`
    names its counters (`cpp_compiles`, `cpp_disk_hits`); `libraries` (-l...) link after it."""
    key = cpp_key(source, extra_flags, libraries)
    so = os.path.join(cache_subdir("cpp"), f"{key}.so")
    if os.path.exists(so):
        logs.counters["backend"][f"{kind}_disk_hits"] += 1
        return so
    src = os.path.join(cache_subdir("cpp"), f"{key}.cpp")
    fd, tmp_src = tempfile.mkstemp(suffix=".cpp", dir=os.path.dirname(src))
    with os.fdopen(fd, "w") as f:
        f.write(source)
    os.replace(tmp_src, src)
    tmp_so = f"{so}.{os.getpid()}.{time.monotonic_ns()}.tmp"
    cmd = [config.cpp_compiler, *flags(), *extra_flags, src, *libraries, "-o", tmp_so]
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


def _load_extension(name, so):
    """Import the extension module `name` from the shared object `so`."""
    loader = importlib.machinery.ExtensionFileLoader(name, so)
    spec = importlib.util.spec_from_file_location(name, so, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def background_extension(state, lock, name, source, get_flags, kind, libraries=(), wait=False):
    """The C extension `name` built from `source` with the flags `get_flags()` gives (or None
    while it is being built, or where it cannot be); the first call builds it in a background
    thread, or loads a build already on disk at once. `state` ({"module", "thread", "failed"})
    and `lock` are the caller's."""
    extra_flags = ()

    def build():
        try:
            so = compile_cpp(source, extra_flags, kind, libraries)
            state["module"] = _load_extension(name, so)
        except Exception as e:  # no compiler, no headers, a refused build: the Python path serves
            state["failed"] = f"{type(e).__name__}: {str(e)[:300]}"
            logs.log("guards", "%s not built (%s): its checks run in Python", name, e)

    if state["module"] is not None or state["failed"] is not None:
        return state["module"]
    with lock:
        if state["thread"] is None:
            try:
                extra_flags = get_flags()  # (raises CompilerError where headers are missing)
                key = cpp_key(source, extra_flags, libraries)
            except CompilerError as e:
                state["failed"] = str(e)
                return None
            if os.path.exists(os.path.join(cache_subdir("cpp"), f"{key}.so")):
                build()  # built by an earlier process: load it now
                state["thread"] = threading.current_thread()
                return state["module"]
            state["thread"] = threading.Thread(target=build, name=f"kiln-{kind}", daemon=True)
            state["thread"].start()
        thread = state["thread"]
    if wait and thread is not threading.current_thread():
        thread.join()
    return state["module"]
