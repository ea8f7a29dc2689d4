"""Compile modes and options: the table of what each means, validation, and applying them.

    kiln.compile(fn, mode="max-autotune")           # a named set of options
    kiln.compile(fn, options={"cpu_backend": "triton"})
    kiln.list_mode_options("reduce-overhead")        # {'cudagraphs': True}

An option is a backend setting (a name of kiln.config, or a flag a mode turns on); it holds for
every graph the compiled function makes (forward, backward, recompiles). An unknown mode or
option is an error listing the valid ones; a mode with nothing to do for the device its graph
runs on (reduce-overhead on CPU) says so once per process.
"""

import contextlib

from kiln import config, logs
from kiln.exc import KilnError

# option name -> (type, what it does); config names are applied to kiln.config while compiling
OPTIONS = {
    "cudagraphs": (bool, "record each CUDA graph after warm-up and replay it (CUDA only)"),
    "max_autotune": (bool, "time kernel configurations at compile time, keep the fastest"),
    "cpu_backend": (str, "'cpp' (C++/OpenMP) or 'triton' (Triton kernels, TRITON_INTERPRET=1)"),
    "num_threads": (int, "OpenMP threads for C++ kernels (0: torch.get_num_threads())"),
    "conv_channels_last": (bool, "inference graphs run 2D convolutions channels-last"),
    "profile_kernels": (bool, "each kernel and ATen call in its own profiler range"),
    "fallback_random": (bool, "random ops as ATen calls: eager's numbers (Triton kernels: Philox)"),
    "strict": (bool, "an internal error or failing backend raises instead of falling back"),
}

# options the frontend takes for itself (every backend): name -> what it does
FRONTEND_OPTIONS = {
    "guard_filter_fn": "f(entries) -> one bool per guard of a new entry: keep it (unsafe to drop)",
}


def split_options(options):
    """(backend options or None, frontend options) of `kiln.compile(options=...)`."""
    if not isinstance(options, dict):
        return options, {}  # (resolve names the bad type)
    front = {k: v for k, v in options.items() if k in FRONTEND_OPTIONS}
    for name, value in front.items():
        if not callable(value):
            raise KilnError(f"option {name!r} takes a function, got {value!r}")
    rest = {k: v for k, v in options.items() if k not in FRONTEND_OPTIONS}
    return (rest or None) if front else options, front


# mode -> the options it sets
MODES = {
    None: {},
    "default": {},
    "reduce-overhead": {"cudagraphs": True},
    "max-autotune": {"max_autotune": True, "cudagraphs": True},
    "max-autotune-no-cudagraphs": {"max_autotune": True},
}

# flags that are not kiln.config names; read with `current(name)`
_FLAGS = {"cudagraphs": False, "max_autotune": False}
_active = [dict(_FLAGS)]


def list_mode_options(mode=None):
    """The options a mode sets (every mode's, as a dict keyed by mode, when mode is None)."""
    if mode is None:
        return {m: dict(o) for m, o in MODES.items() if m is not None}
    check_mode(mode)
    return dict(MODES[mode])


def check_mode(mode):
    if mode not in MODES:
        names = ", ".join(repr(m) for m in MODES if m is not None)
        raise KilnError(f"unknown mode {mode!r}; expected one of None, {names}")


def resolve(mode, options):
    """The options a (mode, options) pair stands for, validated; errors list the valid ones."""
    check_mode(mode)
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise TypeError(f"kiln.compile: options must be a dict, got {type(options).__name__}")
    out = dict(MODES[mode])
    for name, value in options.items():
        if name not in OPTIONS:
            valid = ", ".join(sorted([*OPTIONS, *FRONTEND_OPTIONS]))
            raise KilnError(f"unknown option {name!r}; valid options: {valid}")
        typ = OPTIONS[name][0]
        if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
            raise KilnError(f"option {name!r} takes a {typ.__name__}, got {value!r}")
        if name == "cpu_backend" and value not in ("cpp", "triton"):
            raise KilnError(f"option 'cpu_backend' is 'cpp' or 'triton', got {value!r}")
        out[name] = value
    return out


def current(name):
    """The value of a mode flag (cudagraphs, max_autotune) for the graph being compiled."""
    return _active[-1][name]


@contextlib.contextmanager
def applied(opts):
    """kiln.config and the mode flags set to `opts` for the duration (restored after)."""
    old = {k: getattr(config, k) for k in opts if k not in _FLAGS}
    flags = dict(_active[-1])
    flags.update({k: v for k, v in opts.items() if k in _FLAGS})
    _active.append(flags)
    try:
        for k, v in opts.items():
            if k not in _FLAGS:
                setattr(config, k, v)
        yield
    finally:
        _active.pop()
        for k, v in old.items():
            setattr(config, k, v)


_said = set()


def say_once(key, msg, *args):
    """A warning printed once per process (e.g. a mode with nothing to do on this device)."""
    if key in _said:
        return
    _said.add(key)
    logs.warn(msg, *args)


def with_options(backend_fn):
    """`backend_fn.with_options(mode=, options=)`: the backend compiling under those options."""

    def make(mode=None, options=None):
        opts = resolve(mode, options)

        def backend(gm, example_inputs):
            with applied(opts):
                return backend_fn(gm, example_inputs, opts=opts)

        backend.__name__ = getattr(backend_fn, "__name__", "backend")
        backend.kiln_options = opts
        return backend

    return make
