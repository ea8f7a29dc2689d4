"""Constants in FX graphs that FX cannot write as code by their repr.

Note [Graphs: complex constants that are not finite]
FX writes a constant into the generated code by its repr: complex(1, nan) is "(1+nanj)", where
`nanj` reads as a name (NameError when the graph runs). Every graph kiln generates code for (the
frontend's, the AOT tracer's) has such constants spelled as `complex(re, im)` call nodes first:
their parts print as FX's own `nan` and `inf`, so the code computes the constant again.
"""

import math

import torch.fx


def _nonfinite_complex(value):
    return type(value) is complex and not (math.isfinite(value.real) and math.isfinite(value.imag))


def spell_nonfinite_complex(graph):
    """Replace non-finite complex constants in node arguments by `complex(re, im)` nodes."""
    for node in list(graph.nodes):
        found = []
        torch.fx.node.map_aggregate((node.args, node.kwargs), found.append)
        if not any(_nonfinite_complex(v) for v in found):
            continue
        with graph.inserting_before(node):

            def spelled(v):
                if not _nonfinite_complex(v):
                    return v
                made = graph.call_function(complex, (v.real, v.imag))
                made.meta["example_value"] = made.meta["val"] = v
                return made

            node.args = torch.fx.node.map_aggregate(node.args, spelled)
            node.kwargs = torch.fx.node.map_aggregate(node.kwargs, spelled)


def graph_module(root, graph, **kw):
    """`torch.fx.GraphModule(root, graph)` with its constants spelled (see the note)."""
    spell_nonfinite_complex(graph)
    return torch.fx.GraphModule(root, graph, **kw)
