"""mode="reduce-overhead": record a compiled graph (inference, forward or backward) into a CUDA
graph, then replay it.

    graphed = CUDAGraphed(compiled, example_inputs, static={2, 3})   # 2, 3: parameters
    graphed(x)   # warm-up: runs the compiled graph
    graphed(x)   # records (one recording per input shape), returns its outputs
    graphed(x2)  # copies x2 into the recording's static input, replays: one launch

Note [CUDA graphs: rules]
- Every tensor input has a static copy made at recording time, in the input's exact layout (a
  broadcast input stays broadcast); a call copies an input into it unless it is the tensor copied
  last time, unchanged since (Note [CUDA graphs: stamps and version counters]).
  Parameters (and inputs named `static`) are used in place, never copied: their memory is the
  recording's input (an optimizer step updates them there); if one moved (a parameter replaced),
  the call runs unrecorded.
- One recording per shape entry (sizes, strides, dtypes of the inputs); beyond MAX_ENTRIES shapes
  the graph runs unrecorded (dynamic sizes would record too many).
- Not recorded, with the reason on KILN_LOGS=cudagraphs: CPU tensors among the inputs, an input
  the graph writes in place (replay would write the static copy, not the caller's tensor).
- A replay writes the same output memory: outputs of an earlier replay that the caller still
  holds are moved to memory of their own first (never overwritten under the user; a copy only
  when one is alive).
- Training graphs are recorded too, forward and backward each: the activations a forward saves
  are among its outputs, held by autograd until the backward has run, so the rule above keeps
  them when a second forward replays before the first backward (gradient accumulation over
  micro-batches, say); in a plain step they are dead by the next replay and cost nothing. The
  backward's gradients are outputs as well: a `.grad` that autograd took over as it is, still
  alive at the next backward replay, is moved out the same way. Random ops replay with fresh
  numbers (CUDA graphs advance the generator's offset per replay).
The recorder is pluggable: CudaRecorder (torch.cuda.CUDAGraph) on a GPU, a fake one in the CPU
tests, so that the rules above are tested without a GPU.
"""

import weakref

import torch

from kiln import logs

WARMUP = 1  # unrecorded runs per shape before recording
MAX_ENTRIES = 8  # recordings per graph


def recordable(example_inputs):
    """Whether the recorder in use takes a graph with these inputs (CUDA tensors for CUDA's)."""
    return any(isinstance(x, torch.Tensor) and RECORDER.accepts(x) for x in example_inputs)


class CudaRecorder:
    """Records with torch.cuda.CUDAGraph (after a warm-up on a side stream, as capture needs)."""

    def __init__(self):
        self.graph = torch.cuda.CUDAGraph()

    @staticmethod
    def accepts(t):
        return t.is_cuda

    def record(self, fn):
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            fn()
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(self.graph):
            return fn()

    def replay(self):
        self.graph.replay()


RECORDER = CudaRecorder  # what compile_fx records with (the CPU tests put a fake one here)


def _key(args):
    return tuple(
        (tuple(a.shape), a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor) else a
        for a in args
    )


class _Entry:
    """One recording: its static inputs and outputs."""

    def __init__(self, recorder, inputs, writers, outputs, replayed, seen):
        self.recorder = recorder
        self.inputs = inputs
        self.writers = writers  # per input: (tensor to copy into, index of the input) or None
        self.seen = seen  # per input: the stamp of the tensor last copied in, or None
        self.outputs = outputs
        self.replayed = replayed  # per output: in memory a replay writes (not a parameter)
        self.returned = []  # weak references to the outputs handed out by the last run


class CUDAGraphed:
    """A compiled graph replayed from recordings (Note [CUDA graphs: rules])."""

    def __init__(self, compiled, example_inputs, static=(), recorder=None, role=None):
        recorder = recorder or RECORDER
        self.compiled = compiled
        self.static = set(static)
        self.recorder = recorder
        self.entries = {}
        self.warm = {}
        self.skip = None
        self.role = role
        sources = getattr(compiled, "output_sources", None) or []
        for k, src in enumerate(sources):
            if isinstance(src, (tuple, list)) and src[0] == "written":
                self.skip = f"output {k} is input {src[1]} written in place (a mutated input)"
        for k, x in enumerate(example_inputs):
            if isinstance(x, torch.Tensor) and not recorder.accepts(x):
                self.skip = f"input {k} is a {x.device.type.upper()} tensor"
                break
        if self.skip:
            logs.log("cudagraphs", "kiln: graph not recorded: %s", self.skip)

    def __getattr__(self, name):  # output_strides, cpp_src ... of the compiled graph
        return getattr(self.__dict__["compiled"], name)

    def __call__(self, *args):
        if self.skip:
            return self.compiled(*args)
        key = _key(args)
        entry = self.entries.get(key)
        if entry is None:
            n = self.warm.get(key, 0) + 1
            self.warm[key] = n
            if n <= WARMUP:
                return self.compiled(*args)
            if len(self.entries) >= MAX_ENTRIES:
                if n == WARMUP + 1:
                    logs.log(
                        "cudagraphs",
                        "kiln: inputs %s not recorded: %d recordings already (dynamic sizes)",
                        key,
                        len(self.entries),
                    )
                return self.compiled(*args)
            entry = self._record(key, args)
        return self._replay(entry, args)

    def _record(self, key, args):
        self.static |= {k for k, a in enumerate(args) if isinstance(a, torch.nn.Parameter)}
        inputs, writers = [], []
        for k, a in enumerate(args):
            if k in self.static or not isinstance(a, torch.Tensor):
                inputs.append(a)
                writers.append(None)
            else:
                static, writer = _static_copy(a)
                inputs.append(static)
                writers.append(writer)
        rec = self.recorder()
        outputs = rec.record(lambda: self.compiled(*inputs))
        fixed = {_storage(inputs[k]) for k in self.static if isinstance(inputs[k], torch.Tensor)}
        replayed = [isinstance(o, torch.Tensor) and _storage(o) not in fixed for o in outputs]
        seen = [_stamp(a) for a in args]
        entry = _Entry(rec, inputs, writers, list(outputs), replayed, seen)
        self.entries[key] = entry
        logs.counters["cudagraphs"]["recorded"] += 1
        logs.log("cudagraphs", "kiln: recorded a %s graph for inputs %s", self.role or "", key)
        return entry

    def _replay(self, entry, args):
        # first the earlier outputs the caller holds (one may be a static input, a saved one)
        with torch.no_grad():  # Note [CUDA graphs: rules]
            for ref in entry.returned:
                t = ref()
                if t is not None:  # `.data =`: autograd's saved copies keep their version
                    t.data = t.clone()
                    logs.counters["cudagraphs"]["outputs_copied"] += 1
        entry.returned = []
        for k, (a, s) in enumerate(zip(args, entry.inputs)):
            if not isinstance(a, torch.Tensor):
                continue
            if k in self.static:
                if a.data_ptr() != s.data_ptr():  # a parameter replaced since the recording
                    logs.log("cudagraphs", "kiln: static input %d moved: not replayed", k)
                    return self.compiled(*args)
            else:
                stamp = _stamp(a)
                if stamp is None or not _same(stamp, entry.seen[k], a):
                    writer, index = entry.writers[k]
                    writer.copy_(a[index] if index else a)
                    entry.seen[k] = stamp
                    logs.counters["cudagraphs"]["input_copies"] += 1
        entry.recorder.replay()
        logs.counters["cudagraphs"]["replays"] += 1
        out = [  # Note [CUDA graphs: stamps and version counters]
            (o.data if p else o.detach()) if isinstance(o, torch.Tensor) else o
            for o, p in zip(entry.outputs, entry.replayed)
        ]
        entry.returned = [weakref.ref(o) for o, p in zip(out, entry.replayed) if p]
        return tuple(out)


def _static_copy(a):
    """A recording's copy of input a, in a's exact layout (the graph was compiled for it), and
    how a call writes the next input into it: (tensor to copy into, index of a to copy or None).
    A broadcast input (stride 0 over a dimension longer than 1: an expanded mask) is kept
    broadcast: its one row is the copy's memory, the copy is that row expanded."""
    a = a.detach()
    if any(st == 0 and n > 1 for n, st in zip(a.shape, a.stride())):
        index = tuple(
            slice(0, 1) if st == 0 and n > 1 else slice(None) for n, st in zip(a.shape, a.stride())
        )
        row = _exact_clone(a[index])
        return row.expand(a.shape), (row, index)
    static = _exact_clone(a)
    return static, (static, None)


def _exact_clone(a):
    """A copy with a's sizes and strides (a non-overlapping layout)."""
    out = torch.empty_strided(a.size(), a.stride(), dtype=a.dtype, device=a.device)
    try:
        out.copy_(a)
    except RuntimeError:  # an overlapping layout other than broadcast: a dense copy
        return a.clone(memory_format=torch.contiguous_format)
    return out


def _storage(t):
    return t.untyped_storage().data_ptr()


# Note [CUDA graphs: stamps and version counters]
# A call skips copying an input into the recording when it is the tensor copied last time, unchanged
# since: the same object (a weak reference), the same version, memory and layout. Memory and
# version alone would not do: a replay rewrites its outputs' memory without touching any version
# counter, so the next output of a graph feeding this one (a graph break between them, or the
# activations a forward saves for the backward) has the memory and version of the last. The
# outputs of a replay are handed out as `.data` aliases, each with a version counter of its own:
# copying the next call's inputs into the recording (or writing its outputs) then never looks
# like an in-place change to a tensor autograd saved. A parameter passed through is handed out as
# `.detach()`: an optimizer step before the backward is then seen, as eager sees it.
def _stamp(t):
    """What `_same` compares (None: cannot tell, always copy)."""
    if not isinstance(t, torch.Tensor):
        return None
    try:
        return (weakref.ref(t), t._version, t.data_ptr(), tuple(t.shape), t.stride())
    except (RuntimeError, TypeError):  # an inference tensor has no version counter
        return None


def _same(stamp, seen, t):
    """Whether t is the tensor a stamp was taken of, unchanged since."""
    return seen is not None and seen[0]() is t and stamp[1:] == seen[1:]
