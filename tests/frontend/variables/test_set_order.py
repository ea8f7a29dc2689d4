"""A set iterates in its hash table's order, which depends on how it was built: kiln's sets and
the sets it rebuilds at breaks iterate as eager's (Note [Sets: iteration order is the table's]).
String hashes change with PYTHONHASHSEED, so the programs run in subprocesses with fixed seeds;
under seeds 4, 5, 7, 11 and 13 both checks failed before the fix."""

import os
import subprocess
import sys

import pytest

PROGRAM = r"""
from collections import namedtuple
import torch, kiln
words = [f"name_{i}" for i in range(235)]
src = "def f(x):\n    words = {" + ", ".join(map(repr, words)) + "}\n    BODY\n"
for body in (
    "return x + 1, tuple(words), namedtuple('T', words)._fields",
    "y = x + 1\n    kiln.graph_break()\n    return y, tuple(words), tuple(set(words))",
):
    ns = {"kiln": kiln, "namedtuple": namedtuple}
    exec(src.replace("BODY", body), ns)
    x = torch.ones(1)
    got, want = kiln.compile(ns["f"], backend="eager")(x), ns["f"](x)
    assert got[1:] == want[1:], body
print("ok")
"""


@pytest.mark.parametrize("seed", ["4", "5", "7", "11", "13"])
def test_big_literal_iterates_as_eager(seed, tmp_path):
    env = dict(os.environ, PYTHONHASHSEED=seed, KILN_CACHE_DIR=str(tmp_path))
    out = subprocess.run(
        [sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.stdout.strip() == "ok", out.stderr[-2000:]
