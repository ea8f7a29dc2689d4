#!/bin/bash
# The GPU checks in one command (issue 14): the CUDA tests, the op conformance sweep on CUDA and
# the GPU benchmark, each stage under its own time limit, each writing one log to $OUT.
#     OUT=results/gpu bash benchmarks/gpu_check.sh [probe] [tests] [sweep] [grad] [launch] [profile]
#         [bench] [benchhf] [tune] [tune16] [bench16]
# (no stage named: all of them). BENCH_MODELS, BENCHHF_MODELS, TUNE_MODELS and BENCH16_MODELS pick
# the benchmarks' models; BENCH_MODE and BENCH16_MODE their modes; T_<STAGE> their limits in
# seconds. A benchmark stage runs one `kiln bench` per model, so a stage cut by its limit keeps
# the models it finished (and appends each model's errors.log to the stage's log).
# On a machine without kiln installed, PYTHONPATH=. is enough: kiln runs from the checkout.
# `probe` checks kiln's direct kernel relaunch and turns it off for the later stages if it fails.
# Seen on an H200 (2026-11-26/27): tests ~40 s, sweep ~42 s, grad ~40 s (JOBS=14), profile ~80 s,
# bench ~50-90 s per model (both modes); a machine takes 30-160 s to start. Within a 15-minute lease: `tests profile bench` with BENCH_MODELS of 4.
PY=${PY:-python3}
OUT=${OUT:-results/gpu}
JOBS=${JOBS:-12}
BENCH_MODELS=${BENCH_MODELS:-mlp,resnet,nanogpt,attention,pointwise}
BENCHHF_MODELS=${BENCHHF_MODELS:-hf_gpt2,hf_bert,hf_llama,hf_t5,hf_vit,hf_llama_cache,hf_llama_generate}
TUNE_MODELS=${TUNE_MODELS:-mlp,nanogpt,hf_llama}
BENCH16_MODELS=${BENCH16_MODELS:-mlp,nanogpt,attention,hf_llama,hf_gpt2,hf_bert}
BENCH16_MODE=${BENCH16_MODE:-both}
CMP=kiln,kiln@reduce-overhead,torch.compile,torch.compile@reduce-overhead
STAGES=${*:-probe tests sweep grad launch profile bench benchhf tune tune16 bench16}
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

per_model() {  # per_model NAME SECONDS MODELS BENCH-ARGS...: one `kiln bench` per model
    local name=$1 limit=$2 models=$3 start=$SECONDS
    shift 3
    echo "== $name (limit ${limit}s)"
    : >"$OUT/$name.txt"
    for m in ${models//,/ }; do
        local left=$((limit - (SECONDS - start)))
        [ "$left" -le 5 ] && echo "== $name: no time left for $m" && break
        timeout "$left" $PY -m kiln bench --device cuda --models "$m" --no-progress \
            --out "/tmp/$name-$m" "$@" >>"$OUT/$name.txt" 2>&1
        echo "== $name/$m: rc=$? at $((SECONDS - start))s"
        [ -s "/tmp/$name-$m/errors.log" ] && cat "/tmp/$name-$m/errors.log" >>"$OUT/$name.txt"
    done
    grep -E "^[a-z_0-9]+ +(inference|training) " "$OUT/$name.txt" | grep -v " eager "
}

$PY -c "import torch, triton; print(torch.__version__, triton.__version__, torch.cuda.get_device_name())"
# the guards' C++ tensor checks (built once per machine; each `kiln bench` process would else
# start its own build in the background)
$PY -c "from kiln.frontend import tensor_match as t; print('kiln_tensor_match', t.module(wait=True) is not None, t._state['failed'] or '')"
for stage in $STAGES; do
    case $stage in
    probe)
        TAIL=3 step probe 120 $PY -m pytest -q -x -p no:cacheprovider tests/backend/test_cuda.py \
            -k "direct_relaunch or unary_on_cuda"
        if [ $? != 0 ]; then
            export KILN_TRITON_FAST_LAUNCH=0
            echo "== direct relaunch failed: off for the later stages"
        fi ;;
    tests) TAIL=25 step tests "${T_TESTS:-150}" $PY -m pytest -q -n 8 -rf -p no:cacheprovider \
        tests/backend/test_cuda.py tests/backend/test_cudagraphs.py tests/test_modes.py \
        tests/backend/test_mixed_devices.py tests/frontend/test_modules.py \
        $(ls tests/backend/test_triton_matmul.py 2>/dev/null) ;;
    sweep) KILN_STRICT=1 TAIL=40 step sweep "${T_SWEEP:-170}" $PY benchmarks/conformance.py \
        --backend kiln --device cuda --jobs "$JOBS" --timeout 120 ;;
    grad) KILN_STRICT=1 TAIL=40 step sweep_grad "${T_GRAD:-170}" $PY benchmarks/conformance.py \
        --backend kiln --device cuda --jobs "$JOBS" --timeout 120 --grad ;;
    profile) TAIL=20 step profile "${T_PROFILE:-150}" $PY benchmarks/gpu_profile.py ;;
    launch) TAIL=60 step launch "${T_LAUNCH:-120}" $PY benchmarks/gpu_profile.py --variants \
        --models nanogpt,mlp,pointwise ;;
    bench) per_model bench32 "${T_BENCH:-300}" "$BENCH_MODELS" --mode "${BENCH_MODE:-both}" \
        --compare $CMP ;;
    benchhf) per_model benchhf "${T_BENCHHF:-300}" "$BENCHHF_MODELS" --mode both --compare $CMP ;;
    tune) per_model tune "${T_TUNE:-150}" "$TUNE_MODELS" --mode inference \
        --compare kiln,kiln@max-autotune-no-cudagraphs,torch.compile ;;
    tune16) per_model tune16 "${T_TUNE16:-240}" "$TUNE_MODELS" --mode inference \
        --dtype bfloat16 --compare kiln,kiln@max-autotune-no-cudagraphs,torch.compile ;;
    bench16) per_model bench16 "${T_BENCH16:-240}" "$BENCH16_MODELS" --mode "$BENCH16_MODE" \
        --dtype bfloat16 --compare $CMP ;;
    esac
done
