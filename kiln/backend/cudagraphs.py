"""mode="reduce-overhead": record a compiled inference graph into a CUDA graph, then replay it.

    graphed = CUDAGraphed(compiled, example_inputs, static={2, 3})   # 2, 3: parameters
    graphed(x)   # warm-up: runs the compiled graph
    graphed(x)   # records (one recording per input shape), returns its outputs
    graphed(x2)  # copies x2 into the recording's static input, replays: one launch

Note [CUDA graphs: rules]
- Every tensor input has a static copy made at recording time; a call copies an input into it
  unless the input is the recorded tensor, unchanged since (same memory, same version counter:
  parameters and buffers of an inference model cost nothing). Inputs named `static` are used in
  place (no copy); if one moved (a parameter replaced), the call runs unrecorded.
- One recording per shape entry (sizes, strides, dtypes of the inputs); beyond MAX_ENTRIES shapes
  the graph runs unrecorded (dynamic sizes would record too many).
- Not recorded, with the reason on KILN_LOGS=cudagraphs: CPU tensors among the inputs, an output
  that aliases an input (an input mutated in place: replay would write the static copy), training
  graphs (the saved activations would be overwritten by the next replay).
- A replay writes the same output memory: outputs of an earlier replay that the caller still
  holds are moved to memory of their own first (never overwritten under the user; a copy only
  when one is alive).
The recorder is pluggable: CudaRecorder (torch.cuda.CUDAGraph) on a GPU, a fake one in the CPU
tests, so that the rules above are tested without a GPU.
"""

import weakref

import torch

from kiln import logs

WARMUP = 1  # unrecorded runs per shape before recording
MAX_ENTRIES = 8  # recordings per graph


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


def _key(args):
    return tuple(
        (tuple(a.shape), a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor) else a
        for a in args
    )


class _Entry:
    """One recording: its static inputs and outputs."""

    def __init__(self, recorder, inputs, outputs, seen):
        self.recorder = recorder
        self.inputs = inputs
        self.seen = seen  # per input: (data_ptr, version) of the tensor last copied in, or None
        self.outputs = outputs
        self.returned = []  # weak references to the outputs handed out by the last run


class CUDAGraphed:
    """A compiled graph replayed from recordings (Note [CUDA graphs: rules])."""

    def __init__(self, compiled, example_inputs, static=(), recorder=CudaRecorder, role=None):
        self.compiled = compiled
        self.static = set(static)
        self.recorder = recorder
        self.entries = {}
        self.warm = {}
        self.skip = None
        sources = getattr(compiled, "output_sources", None) or []
        if role in ("forward", "backward"):
            self.skip = "a training graph (its saved activations would be overwritten)"
        for k, src in enumerate(sources):
            if isinstance(src, tuple) and src[0] == "input":
                self.skip = f"output {k} aliases input {src[1]} (an input mutated in place)"
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
        inputs = [
            a if k in self.static or not isinstance(a, torch.Tensor) else a.detach().clone()
            for k, a in enumerate(args)
        ]
        rec = self.recorder()
        outputs = rec.record(lambda: self.compiled(*inputs))
        entry = _Entry(rec, inputs, list(outputs), [_stamp(a) for a in args])
        self.entries[key] = entry
        logs.counters["cudagraphs"]["recorded"] += 1
        logs.log("cudagraphs", "kiln: recorded a graph for inputs %s", key)
        return entry

    def _replay(self, entry, args):
        for k, (a, s) in enumerate(zip(args, entry.inputs)):
            if not isinstance(a, torch.Tensor):
                continue
            if k in self.static:
                if a.data_ptr() != s.data_ptr():  # a parameter replaced since the recording
                    logs.log("cudagraphs", "kiln: static input %d moved: not replayed", k)
                    return self.compiled(*args)
            else:
                stamp = _stamp(a)
                if stamp is None or stamp != entry.seen[k]:
                    s.copy_(a)
                    entry.seen[k] = stamp
                    logs.counters["cudagraphs"]["input_copies"] += 1
        with torch.no_grad():  # Note [CUDA graphs: rules]: keep earlier outputs the caller holds
            for ref in entry.returned:
                t = ref()
                if t is not None:
                    t.set_(t.clone())
                    logs.counters["cudagraphs"]["outputs_copied"] += 1
        entry.recorder.replay()
        logs.counters["cudagraphs"]["replays"] += 1
        out = [o.detach() if isinstance(o, torch.Tensor) else o for o in entry.outputs]
        entry.returned = [weakref.ref(o) for o in out if isinstance(o, torch.Tensor)]
        return tuple(out)


def _stamp(t):
    """(memory, version) of a tensor: equal stamps mean equal contents (None: cannot tell)."""
    if not isinstance(t, torch.Tensor):
        return None
    try:
        return (t.data_ptr(), t._version, tuple(t.shape), t.stride())
    except RuntimeError:  # an inference tensor has no version counter
        return None
