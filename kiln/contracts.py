"""The contracts between kiln's stages, as frozen dataclasses (docs/ARCHITECTURE.md, "Contracts").

    CompileSettings   kiln.compile(...) -> every frame cache of that compile (frontend)
    GraphMeta         what travels with an FX graph from stage to stage (frontend -> autograd ->
                      backend; compiled autograd -> frontend), stored in `gm.meta`
    OutputLayouts     what a compiled graph reports about its outputs (backend -> autograd)
    BreakState        where a graph break stops the root frame and the live state there
                      (translator -> the transformed code at the break)

This module imports nothing of kiln's: every layer may use it.
"""

import dataclasses
from collections.abc import Callable, Mapping


@dataclasses.dataclass(frozen=True)
class CompileSettings:
    """What one `kiln.compile(...)` call asked for; every frame cache it makes shares it."""

    backend: Callable  # (gm, example_inputs) -> callable, already resolved (kiln.registry)
    backend_name: str  # for messages and checks ("eager" skips some work)
    fullgraph: bool = False  # every graph break is an error
    dynamic: bool | None = None  # torch.compile's dynamic=: None (automatic), True, False
    mode: str | None = None  # as given; the backend already has it (`with_options`)
    options: Mapping | None = None  # as given; the backend already has them
    guard_filter_fn: Callable | None = None  # Note [Guards: user filters]


# Note [Contracts: graph metadata]
# FX gives every GraphModule a `meta` dict; the stages hand each other facts about a graph there.
# The keys and their meanings are declared once, here: stages read `GraphMeta.of(gm)` (a frozen
# snapshot with the defaults filled in) and write with `GraphMeta.update(gm, field=value)`,
# never a string key of their own. The storage stays `gm.meta[<field name>]`, so a graph printed
# or inspected with FX tools shows the same facts.
@dataclasses.dataclass(frozen=True)
class GraphMeta:
    """Facts about an FX graph that one stage tells the next (Note [Contracts: graph metadata])."""

    # the frame's ShapeEnv when the graph has size symbols (frontend/AOT -> backend)
    shape_env: object = None
    # the frontend guards every input's layout (Note [AOT: inputs the frontend guards])
    inputs_guarded: bool = False
    # compiled autograd: the graph reads its sizes from inputs, compile it size-generic
    kiln_dynamic: bool = False
    # AOT forward: outputs (saved activations) whose layout the forward compiler may choose
    # (Note [AOT: saved activations keep their layout])
    free_layout_outputs: frozenset = frozenset()
    # AOT: {output k: input i} where output k is input i's new value (Note [Backend: mutations])
    input_mutations: Mapping | None = None
    # partition: how many forward outputs are saved for the backward
    num_saved: int = 0
    # trace_aten: the pytree spec of the traced function's output
    out_spec: object = None
    # a kiln backend compiled the graph for its symbolic sizes, not for the example values
    # (Note [Output graph: backends that read example values])
    size_generic: bool = False

    @classmethod
    def of(cls, gm):
        """The metadata of `gm` (defaults where a stage set nothing; any object without .meta)."""
        meta = getattr(gm, "meta", None) or {}
        return cls(**{f: meta[f] for f in _GRAPH_META_FIELDS if f in meta})

    @staticmethod
    def update(gm, **fields):
        """Set fields of `gm`'s metadata (checked against the declared ones)."""
        unknown = set(fields) - set(_GRAPH_META_FIELDS)
        if unknown:
            raise TypeError(f"GraphMeta has no field(s) {sorted(unknown)}")
        gm.meta.update(fields)


_GRAPH_META_FIELDS = tuple(f.name for f in dataclasses.fields(GraphMeta))


@dataclasses.dataclass(frozen=True)
class OutputLayouts:
    """What a compiled graph tells the AOT layer about its outputs; all optional.

    A backend's compiled callable reports them as its `layouts` attribute (`output_layouts`
    reads it; a callable without one reports nothing, which is always correct, only slower).
    """

    # per output: its static strides, or None (Note [AOT: saved activations keep their layout])
    strides: tuple | None = None
    # per output: "fresh" | ("input", k) | None, where its memory comes from (aot_runtime)
    sources: tuple | None = None


def output_layouts(compiled):
    """The OutputLayouts a compiled callable reports (empty when it reports none)."""
    return getattr(compiled, "layouts", None) or OutputLayouts()


@dataclasses.dataclass(frozen=True)
class CompileEvent:
    """What kiln.on_compile_start / on_compile_end callbacks receive: the function whose frame
    is compiled (the user's, or a resume function kiln made after a graph break)."""

    fn: object
    name: str  # its qualified name (a resume function's: `f.__resume_at_40`)
    compiled: bool | None = None  # at the end: False if the compile raised (None at the start)


@dataclasses.dataclass(frozen=True)
class BreakState:
    """Where a graph break stops the root frame, and the state live there (what the transformed
    code at the break and the resume function are built from)."""

    tx: object  # the root InstructionTranslator
    index: int  # the instruction the break is placed at
    stack: list  # the value stack before it
    locals: Mapping  # name -> VariableTracker, before it
    checkpoint: object  # the graph's checkpoint before it (OutputGraph.rollback)
    kw_names: object  # pending KW_NAMES (Python 3.11/3.12)
    effects_version: int  # SideEffects.version before it
    effects_snapshot: object  # SideEffects.snapshot() before it
    resume_here: bool = False  # resume AT the instruction (Note [Blocks: rewinding to a try block])


@dataclasses.dataclass(frozen=True)
class NestedState:
    """Where a graph break stopped an inlined call's frame, and the state live there (Note
    [Nested breaks: placing the break in the callee])."""

    tx: object  # the InliningTranslator
    index: int  # the instruction that broke (in a caller: the call of the next frame)
    stack: list  # the value stack before it
    locals: Mapping  # name -> VariableTracker, before it
    checkpoint: object  # the graph's checkpoint before it
    kw_names: object  # pending KW_NAMES (Python 3.11/3.12)
    effects_mark: tuple  # SideEffects.mark() before it
