"""Emits the transformed bytecode: call the compiled graph, rebuild the return value, return.

def f(x, mod):                       def f(x, mod):   # transformed
    y = mod(x)                           ___out = __kiln_compiled_fn_0(x)
    return torch.log(y)                  return ___out[0]
"""

from kiln import logs
from kiln.bytecode import decode, emit, encode, first_resume
from kiln.exc import unimplemented
from kiln.frontend.variables.lists import SizeVariable

GRAPH_OUT = "___kiln_graph_out"


class PyCodegen:
    """Collects instructions; tensors not from a source become outputs of the graph."""

    def __init__(self, output):
        self.output = output
        self.instrs = []
        self.graph_outputs = []  # TensorVariables, in graph output order
        self._output_index = {}

    def append(self, instr):
        self.instrs.append(instr)

    def extend(self, instrs):
        self.instrs.extend(instrs)

    def reconstruct(self, var):
        var.reconstruct(self)

    def reconstruct_tensor(self, var):
        if var.source is not None:
            var.source.reconstruct(self)
            return
        key = id(var.proxy)
        if key not in self._output_index:
            self._output_index[key] = len(self.graph_outputs)
            self.graph_outputs.append(var)
        self.extend(emit.load_fast(GRAPH_OUT))
        self.extend(emit.load_const(self._output_index[key]))
        self.extend(emit.binary_subscr())

    def load_object(self, value, push_null=False):
        """Load an object kiln holds (a dtype, a torch.Size ...) via a global of the root function."""
        name = f"___kiln_obj_{type(value).__name__}_{id(value)}"
        self.output.root_fn.__globals__[name] = value
        self.extend(emit.load_global(name, push_null=push_null))

    def load_global_dict(self, guard_name):
        self.load_object(self.output.extra_globals[guard_name])


def assemble(code, body):
    """A code object like `code` (arguments, cells, prologue up to RESUME) that runs `body`."""
    original = decode(code)
    prologue = original[: first_resume(original) + 1]
    varnames = code.co_varnames
    if GRAPH_OUT not in varnames:
        varnames = (*varnames, GRAPH_OUT)
    return encode(prologue + body, like=code, co_varnames=varnames)


def transformed_code(output, code, return_var):
    """The transformed code object of a frame that traced to `return return_var` in one graph."""
    body = PyCodegen(output)
    if isinstance(return_var, SizeVariable):
        body.load_object(return_var.as_python_constant())
    else:
        body.reconstruct(return_var)
    body.extend(emit.return_value())
    name, input_sources = output.compile_subgraph(body.graph_outputs)
    if name is None and body.graph_outputs:
        unimplemented("returning a tensor made without a tensor op")
    call = PyCodegen(output)
    if name is not None:
        call.extend(emit.load_global(name, push_null=True))
        for source in input_sources:
            source.reconstruct(call)
        call.extend(emit.call(len(input_sources)))
        call.extend(emit.store_fast(GRAPH_OUT))
    new_code = assemble(code, call.instrs + body.instrs)
    if logs.enabled("bytecode"):
        import dis
        import io

        buf = io.StringIO()
        dis.dis(code, file=buf)
        buf.write("--- transformed ---\n")
        dis.dis(new_code, file=buf)
        logs.log("bytecode", "bytecode of %s:\n%s", code.co_qualname, buf.getvalue())
    return new_code
