"""Graph nodes named after the locals their tensors go into, and carrying the user's line
(Note [Graph: node names and lines])."""

import torch
from frontend_helpers import CountingBackend

import kiln


def stored(a):
    x = torch.ones(2)
    y = a.sin()
    x = x + y
    return x * 2, a.cos()


def test_nodes_named_after_locals_once():
    backend = CountingBackend()
    a = torch.randn(2)
    got = kiln.compile(stored, backend=backend, fullgraph=True)(a)
    expected = stored(a)
    assert all(torch.equal(g, e) for g, e in zip(got, expected))
    names = [n.name for n in backend.graphs[0].graph.nodes if n.op == "call_function"]
    names += [n.name for n in backend.graphs[0].graph.nodes if n.op == "call_method"]
    # ones -> x, sin -> y, the add -> x_1 (x is taken), the rest keep their op names
    assert {"x", "y", "x_1", "mul", "cos"} == set(names)
    placeholders = [n.name for n in backend.graphs[0].graph.nodes if n.op == "placeholder"]
    assert placeholders and "x" not in placeholders and "y" not in placeholders


def test_nodes_carry_their_line():
    backend = CountingBackend()
    kiln.compile(stored, backend=backend, fullgraph=True)(torch.randn(2))
    lines = {}
    for n in backend.graphs[0].graph.nodes:
        if n.op in ("call_function", "call_method"):
            assert "in stored" in n.meta["stack_trace"]
            lines[n.name] = n.meta["stack_trace"].split("\n")[1].strip()
    assert lines["x"] == "x = torch.ones(2)" and lines["cos"] == "return x * 2, a.cos()"
    code = backend.graphs[0].print_readable(False)
    assert code.count("code: x = torch.ones(2)") == 1


def shadowing(x):
    self = x.sin()
    L_x_ = self * 2
    return L_x_ + x


def test_names_of_the_forward_itself_are_not_taken():
    backend = CountingBackend()
    x = torch.randn(3)
    assert torch.equal(kiln.compile(shadowing, backend=backend)(x), shadowing(x))
    code = backend.graphs[0].code
    assert "self =" not in code and "L_x_ =" not in code.split("\n", 2)[2]


def test_placeholders_carry_the_literal_attributes_of_their_tensor():
    backend = CountingBackend()
    a, b = torch.randn(2), torch.randn(2)
    a.tag = "pinned"  # a mark a backend may read (as torch's mark_static_address leaves one)
    a.helper = object()  # not a literal: not kept (the graph holds nothing alive)
    kiln.compile(lambda x, y: x + y, backend=backend, fullgraph=True)(a, b)
    metas = {n.name: n.meta for n in backend.graphs[0].graph.nodes if n.op == "placeholder"}
    assert metas["l_x_"]["tensor_dict"] == {"tag": "pinned"}
    assert metas["l_y_"]["tensor_dict"] == {}
