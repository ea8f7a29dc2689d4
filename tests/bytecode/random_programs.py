"""Seeded random Python functions for the round-trip and resume checks (no torch, no pytest).

Each program is a function f(a, b, log) built from assignments, arithmetic that may raise,
if/else, for/while loops with break/continue, try/except/finally, with blocks, comprehensions,
closures and calls that append to `log`; running it is deterministic.
"""

import random

VARS = ("a", "b", "c", "d", "e")


class CM:
    """A context manager that logs enter/exit and swallows KeyError."""

    def __init__(self, log, name):
        self.log, self.name = log, name

    def __enter__(self):
        self.log.append(("enter", self.name))
        return self.name

    def __exit__(self, typ, val, tb):
        self.log.append(("exit", self.name, typ.__name__ if typ else None))
        return typ is KeyError


class Gen:
    """Source text of one random function."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.lines = []
        self.depth = 0
        self.loop = 0
        self.counter = 0

    def expr(self, d=0):
        r = self.rng.random()
        if d > 2 or r < 0.3:
            return self.rng.choice([*VARS, str(self.rng.randint(-3, 9))])
        if r < 0.55:
            op = self.rng.choice(["+", "-", "*", "//", "%", "&", "|", "^"])
            return f"({self.expr(d + 1)} {op} {self.expr(d + 1)})"
        if r < 0.65:
            return f"({self.expr(d + 1)} if {self.cond(d + 1)} else {self.expr(d + 1)})"
        if r < 0.75:
            return f"sum([{self.expr(d + 1)} for x in range({self.small()})])"
        if r < 0.85:
            return f"max({self.expr(d + 1)}, {self.expr(d + 1)}, key=abs)"
        return f"len([{self.rng.choice(VARS)}, *range({self.small()})])"

    def small(self):
        return f"abs({self.rng.choice(VARS)}) % 4"

    def cond(self, d=0):
        op = self.rng.choice(["<", "<=", "==", "!=", ">", ">="])
        c = f"{self.expr(d + 1)} {op} {self.expr(d + 1)}"
        if self.rng.random() < 0.2:
            c = f"{c} < {self.expr(d + 1)}" if op in "<>" else f"not ({c})"
        return c

    def emit(self, text):
        self.lines.append("    " * (self.depth + 1) + text)

    def block(self, n):
        self.depth += 1
        for _ in range(n):
            self.stmt()
        self.depth -= 1

    def stmt(self):
        r = self.rng.random()
        deep = self.depth > 3
        if r < 0.3 or deep:
            self.emit(f"{self.rng.choice(VARS)} = {self.expr()}")
        elif r < 0.4:
            self.emit(f"log.append(({self.expr()}, {self.rng.choice(VARS)}))")
        elif r < 0.5:
            self.emit(f"if {self.cond()}:")
            self.block(self.rng.randint(1, 3))
            if self.rng.random() < 0.5:
                self.emit("else:")
                self.block(self.rng.randint(1, 2))
        elif r < 0.6:
            self.emit(f"for i{self.depth} in range({self.small()} + 1):")
            self.loop += 1
            self.block(self.rng.randint(1, 3))
            self.loop -= 1
        elif r < 0.66:
            k = self.counter = self.counter + 1
            self.emit(f"w{k} = 0")
            self.emit(f"while w{k} < 3:")
            self.depth += 1
            self.emit(f"w{k} += 1")
            self.depth -= 1
            self.loop += 1
            self.block(self.rng.randint(1, 2))
            self.loop -= 1
        elif r < 0.7 and self.loop:
            self.emit(f"if {self.cond()}:")
            self.depth += 1
            self.emit(self.rng.choice(["break", "continue"]))
            self.depth -= 1
        elif r < 0.8:
            self.emit("try:")
            self.block(self.rng.randint(1, 3))
            self.emit(f"except {self.rng.choice(['ZeroDivisionError', 'ArithmeticError'])}:")
            self.block(1)
            if self.rng.random() < 0.4:
                self.emit("finally:")
                self.block(1)
        elif r < 0.87:
            self.emit(f"with CM(log, {self.rng.randint(0, 9)}) as {self.rng.choice(VARS)}:")
            self.block(self.rng.randint(1, 3))
        elif r < 0.92:
            self.emit(f"if {self.cond()}:")
            self.depth += 1
            self.emit(f"raise {self.rng.choice(['KeyError', 'ValueError'])}({self.expr()})")
            self.depth -= 1
        elif r < 0.96:
            v = self.rng.choice(VARS)
            self.emit(f"def inner(z, {v}={v}):")
            self.depth += 1
            self.emit(f"return z + {v} + c")
            self.depth -= 1
            self.emit(f"{self.rng.choice(VARS)} = inner({self.expr()})")
        else:
            self.emit(f"{self.rng.choice(VARS)}, *rest = [{self.expr()}, {self.expr()}]")

    def source(self, n=8):
        self.lines = ["def f(a, b, log):", "    c = d = e = 1"]
        for _ in range(n):
            self.stmt()
        self.lines.append("    return (a, b, c, d, e)")
        return "\n".join(self.lines)


def make(seed, n=8):
    """The function of a seed with n top-level statements (CM is in its globals)."""
    src = Gen(seed).source(n)
    ns = {"CM": CM}
    exec(compile(src, f"<random {seed}>", "exec"), ns)
    fn = ns["f"]
    fn.source = src
    return fn


INPUTS = [(0, 1, []), (3, -2, []), (7, 5, [])]


def sweep(lo, hi):
    """Round trip, edits and simulated breaks for seeds lo..hi; prints failures."""
    import time

    import resume_checks
    import roundtrip_checks

    B = resume_checks.B
    start, bad = time.time(), 0
    for seed in range(lo, hi):
        fn = make(seed)
        try:
            roundtrip_checks.check_roundtrip(fn, INPUTS, B)
            roundtrip_checks.check_edits(fn, INPUTS, B)
            resume_checks.check_function(fn, INPUTS, max_points=10)
        except Exception as e:  # noqa: BLE001 - report and go on
            bad += 1
            print(f"seed {seed}: {type(e).__name__}: {str(e)[:300]}", flush=True)
    print(f"{hi - lo} programs, {bad} failing, {time.time() - start:.1f}s")
    return bad


if __name__ == "__main__":
    import sys

    sys.exit(1 if sweep(int(sys.argv[1]), int(sys.argv[2])) else 0)
