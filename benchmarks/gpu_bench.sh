#!/bin/sh
# The GPU benchmark in one command (issue 14): kiln vs eager and torch.compile, default and
# reduce-overhead modes, inference and training, float32 then bfloat16, on the first CUDA device.
#     sh benchmarks/gpu_bench.sh [extra kiln bench args, e.g. --models resnet18,nanogpt]
set -e
PY=${PY:-.venv/bin/python}
CMP=kiln,kiln@reduce-overhead,torch.compile,torch.compile@reduce-overhead
for dtype in float32 bfloat16; do
    $PY -m kiln bench --device cuda --dtype $dtype --mode both --compare $CMP \
        --out results/gpu-$dtype "$@"
done
