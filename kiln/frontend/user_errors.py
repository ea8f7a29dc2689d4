"""Errors a user can act on: the user's frames, a hint per break reason, kiln's frames hidden.

Note [Errors: what a fullgraph error shows]
Under fullgraph=True a graph break raises `kiln.exc.Unsupported`. Its message is the reason, then
the user's frames that were being traced, outermost first (the compiled function, then each
inlined call down to the line that broke), then a hint from HINTS when one matches the reason. The
traceback starts at kiln's entry wrapper: the interpreter's frames (translator, variables) are
dropped unless `KILN_VERBOSE=1` (config.verbose), which keeps the whole traceback.
"""

import linecache
import re

from kiln import config, logs

# (pattern matched against the break reason, what to do instead). First match wins.
HINTS = [
    (
        r"\.item\(\)|_local_scalar_dense|tolist\(\)|int\(\) of a tensor|float\(\) of a tensor",
        "the value is read out of a tensor into Python, which a graph cannot hold: keep it a "
        "tensor (use `x.sum()` in the arithmetic instead of `x.sum().item()`), or read it "
        "outside the compiled function and pass the number in.",
    ),
    (
        r"bool\(\) of a tensor|data-dependent branch|`in` on a tensor",
        "a Python `if`/`while` on tensor data: compute both sides and pick with "
        "`torch.where(cond, a, b)`, or move the branch outside the compiled function.",
    ),
    (
        r"data-dependent shape",
        "the output's size depends on tensor values: use a fixed-size form (`torch.where(mask, "
        "x, 0)` instead of `x[mask]`, `nonzero_static`), or run this step outside the compiled "
        "function.",
    ),
    (
        r"numpy",
        "NumPy leaves torch: write it with torch ops, or convert outside the compiled function.",
    ),
    (
        r"builtin print",
        "print() runs in Python between graphs: remove it, or use `logger.warning(...)` / "
        "`warnings.warn(...)`, which kiln replays after the graph without a break.",
    ),
    (
        r"kiln\.graph_break\(\)",
        "the code asks for a break with kiln.graph_break(): remove the call to get one graph.",
    ),
    (
        r"@torch\.compiler\.disable|@torch\._dynamo\.disable|@kiln\.disable|kept out of compil",
        "the function is decorated to stay out of compilation: remove the decorator to trace it, "
        "or call it outside the compiled function.",
    ),
    (
        r"Random\.|call to (time|perf_counter|monotonic) ",
        "Python's random numbers and clocks are not graph values: use torch.rand/torch.randn "
        "(traced), or read the clock outside the compiled function.",
    ),
    (
        r"not traceable|call to torch function|unknown C function",
        "kiln cannot see inside this function (C code or a module it skips): call it outside "
        "the compiled function and pass its result in, or wrap it with `@kiln.disable` and "
        "accept the break.",
    ),
    (
        r"Tensor\.backward\(\)",
        "call .backward() outside the compiled function (compile the forward and the loss), "
        "or set kiln.config.compiled_autograd = True.",
    ),
    (
        r"inlining depth limit",
        "deep recursion: raise kiln.config.inline_depth_limit, or compile the inner function on "
        "its own.",
    ),
    (
        r"kiln\.set_stance",
        "set the stance outside the compiled function, around the call (as a `with` block or "
        "a decorator on the caller), or accept the break.",
    ),
    (
        r"\.forward changes when the graph runs",
        "return the value from forward (as an output of the apply) instead of reading it back "
        "from the container after the call; without fullgraph=True the code after the apply "
        "runs in Python and sees the container as eager does.",
    ),
    (
        r"module hooks|forward hooks|backward hooks",
        "register the hooks after compiling, or remove them while compiling with fullgraph=True.",
    ),
]


def hint_for(reason):
    """The HINTS entry for a break reason, or None."""
    for pattern, hint in HINTS:
        if re.search(pattern, reason):
            return hint
    return None


def user_frames(e):
    """[(file, line, function name, source text)] of the traced user frames, outermost first."""
    out = []
    for code, _index, lineno in reversed(getattr(e, "frames", None) or []):
        text = linecache.getline(code.co_filename, lineno).strip() if lineno else ""
        out.append((code.co_filename, lineno, code.co_qualname, text))
    return out


def format_frames(frames):
    lines = []
    for filename, lineno, name, text in frames:
        lines.append(f'  File "{filename}", line {lineno}, in {name}')
        if text:
            lines.append(f"    {text}")
    return lines


def fullgraph_error(e, fn, why="fullgraph=True"):
    """Dress an Unsupported raised under fullgraph=True, or `why` (Note [Errors: what a fullgraph
    ...])."""
    if getattr(e, "kiln_details", None):
        return e
    lines = [f"(graph break in {fn.__qualname__} under {why})"]
    frames = user_frames(e)
    if frames:
        lines.append("User code, outermost call first:")
        lines.extend(format_frames(frames))
    hint = hint_for(e.msg)
    if hint:
        lines.append(f"Hint: {hint}")
    if not config.verbose:
        lines.append("(kiln's internal frames are hidden; KILN_VERBOSE=1 shows them)")
    e.kiln_details = "\n".join(lines)
    e.kiln_trim = not config.verbose
    return e


def warn_graph_breaks(fn, breaks, module_root=False):
    """The once-per-function warning that a compiled function broke into several graphs."""
    code = fn.__code__
    target = "model" if module_root else fn.__name__
    first = breaks[0]
    n = len(breaks)
    logs.warn(
        "kiln: %d graph break%s in %s (%s:%d), first: %s at %s. See them all with "
        "KILN_LOGS=graph_breaks or kiln.explain(%s)(...); silence with "
        "kiln.config.warn_graph_breaks = False (KILN_WARN_GRAPH_BREAKS=0)",
        n,
        "s" * (n != 1),
        fn.__qualname__,
        code.co_filename,
        code.co_firstlineno,
        first.reason,
        first.user_location,
        target,
    )


def disabled_by(fn):
    """The decorator the user wrote to keep `fn` out of compilation, as its source spells it."""
    if isinstance(getattr(fn, "__dict__", None), dict) and fn.__dict__.get("_kiln_disabled"):
        return "@kiln.disable"
    if getattr(type(fn), "_kiln_disabled_module", False) is True:
        return "kiln.disable"
    inner = getattr(fn, "_torchdynamo_orig_callable", None) or getattr(fn, "__wrapped__", None)
    code = getattr(inner, "__code__", None)
    if code is not None:
        for lineno in range(code.co_firstlineno, code.co_firstlineno + 20):
            text = linecache.getline(code.co_filename, lineno).strip()
            if not text.startswith("@"):
                break
            if re.match(r"@\s*torch\.compiler\.disable\b", text):
                return "@torch.compiler.disable"
            if re.match(r"@\s*torch\._dynamo\.disable\b", text):
                return "@torch._dynamo.disable"
    return "torch.compiler.disable / torch._dynamo.disable"
