"""kiln/ must not import what we build ourselves (docs/ARCHITECTURE.md)."""

import ast
import pathlib

KILN = pathlib.Path(__file__).resolve().parent.parent / "kiln"

# Module prefixes never imported inside kiln/: the parts of torch.compile we build ourselves.
FORBIDDEN = (
    "torch._dynamo",
    "torch._inductor",
    "torch._functorch",
    "torch.func",
    "torch.export",
    "torch.jit",
    "torch._subclasses",
    "torch._guards",
    "torch._higher_order_ops",
    "torch.fx.experimental.proxy_tensor",
    "torch.fx.experimental.symbolic_shapes",
)


def _forbidden(module):
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


def _violations(path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Attribute):
            # torch.compile(...), torch._dynamo.x, torch.jit.script ... used without an import
            parts = []
            inner = node
            while isinstance(inner, ast.Attribute):
                parts.append(inner.attr)
                inner = inner.value
            if not (isinstance(inner, ast.Name) and inner.id == "torch"):
                continue
            dotted = ".".join(["torch", *reversed(parts)])
            names = [dotted] if dotted == "torch.compile" or _forbidden(dotted) else []
        else:
            continue
        bad = [n for n in names if _forbidden(n) or n == "torch.compile"]
        if bad:
            yield f"{path.relative_to(KILN.parent)}:{node.lineno}: {bad[0]}"


def test_kiln_imports_nothing_we_build_ourselves():
    bad = [v for path in sorted(KILN.rglob("*.py")) for v in _violations(path)]
    assert not bad, "kiln/ uses modules we build ourselves:\n" + "\n".join(bad)


def test_the_scan_catches_each_kind(tmp_path):
    sample = tmp_path / "kiln" / "bad.py"
    sample.parent.mkdir()
    sample.write_text(
        "import torch._dynamo\n"
        "from torch.fx.experimental.proxy_tensor import make_fx\n"
        "from torch import _inductor\n"
        "y = torch.compile(f)\n"
    )
    global KILN
    saved, KILN = KILN, sample.parent
    try:
        found = list(_violations(sample))
    finally:
        KILN = saved
    assert len(found) == 4, found
