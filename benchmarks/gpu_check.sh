#!/bin/bash
# The GPU checks in one command (issue 14): the CUDA tests, the op conformance sweep on CUDA and
# the GPU benchmark, each under its own time limit, each writing one log to $OUT.
#     OUT=results/gpu bash benchmarks/gpu_check.sh [probe] [tests] [sweep] [grad] [launch] [bench]
#         [benchhf] [bench16]
# (no stage named: all of them). BENCH_MODELS / BENCH16_MODELS pick the benchmark's models. On a
# machine without kiln installed, PYTHONPATH=. is enough: kiln runs from the checkout. `probe`
# checks kiln's direct kernel relaunch first and turns it off for the later stages if it fails.
PY=${PY:-python3}
OUT=${OUT:-results/gpu}
JOBS=${JOBS:-12}
BENCH_MODELS=${BENCH_MODELS:-mlp,resnet,nanogpt,attention,pointwise}
BENCHHF_MODELS=${BENCHHF_MODELS:-hf_gpt2,hf_bert,hf_llama,hf_t5,hf_vit,hf_llama_cache,hf_llama_generate}
BENCH16_MODELS=${BENCH16_MODELS:-mlp,nanogpt,attention,hf_llama,hf_gpt2,hf_bert}
CMP=kiln,kiln@reduce-overhead,torch.compile,torch.compile@reduce-overhead
STAGES=${*:-probe tests sweep grad launch bench benchhf bench16}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 KILN_CACHE_DIR=${KILN_CACHE_DIR:-/tmp/kiln-cache}

step() {  # step NAME SECONDS COMMAND...: the command's output in $OUT/NAME.txt, its tail here
    local name=$1 limit=$2 start=$SECONDS
    shift 2
    echo "== $name (limit ${limit}s)"
    timeout "$limit" "$@" >"$OUT/$name.txt" 2>&1
    local rc=$?
    echo "== $name: rc=$rc in $((SECONDS - start))s"
    tail -n "${TAIL:-8}" "$OUT/$name.txt"
    return $rc
}

$PY -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
for stage in $STAGES; do
    case $stage in
    probe)
        TAIL=3 step probe 120 $PY -m pytest -q -x -p no:cacheprovider tests/backend/test_cuda.py \
            -k "direct_relaunch or unary_on_cuda"
        if [ $? != 0 ]; then
            export KILN_TRITON_FAST_LAUNCH=0
            echo "== direct relaunch failed: off for the later stages"
        fi ;;
    launch) TAIL=60 step launch "${T_LAUNCH:-120}" $PY benchmarks/launch_overhead.py ;;
    tests) TAIL=25 step tests "${T_TESTS:-150}" $PY -m pytest -q -n 8 -rf -p no:cacheprovider \
        tests/backend/test_cuda.py tests/backend/test_cudagraphs.py tests/test_modes.py \
        tests/frontend/test_modules.py ;;
    sweep) KILN_STRICT=1 TAIL=40 step sweep "${T_SWEEP:-170}" $PY benchmarks/conformance.py \
        --backend kiln --device cuda --jobs "$JOBS" --timeout 120 ;;
    grad) KILN_STRICT=1 TAIL=40 step sweep_grad "${T_GRAD:-170}" $PY benchmarks/conformance.py \
        --backend kiln --device cuda --jobs "$JOBS" --timeout 120 --grad ;;
    bench) TAIL=40 step bench32 "${T_BENCH:-240}" $PY -m kiln bench --device cuda --mode both \
        --compare $CMP --models "$BENCH_MODELS" --no-progress --out /tmp/bench32 ;;
    benchhf) TAIL=40 step benchhf "${T_BENCHHF:-240}" $PY -m kiln bench --device cuda --mode both \
        --compare $CMP --models "$BENCHHF_MODELS" --no-progress --out /tmp/benchhf ;;
    bench16) TAIL=40 step bench16 "${T_BENCH:-240}" $PY -m kiln bench --device cuda --mode both \
        --dtype bfloat16 --compare $CMP --models "$BENCH16_MODELS" --no-progress --out /tmp/bench16 ;;
    esac
done
