#!/usr/bin/env bash
# bench/gpu/run.sh: everything GPU-side in one call, for the lent GPU machine (or any machine
# with nvcc and a GPU): builds with bench/gpu/build.sh (no CMake, no packages), runs the parity
# tests of tests/gpu, then times a decode of a synthetic Qwen3-30B-A3B-shaped Q4_K_M file
# (tools/make_synthetic.py, with the gguf package carried in .gpudeps/py) through
# load_model_cuda. Logs go to $OUT (default /tmp/sluice-gpu): run.log plus one log per program,
# named <program>.h200.log so they can be copied into tests/gpu/ as they are.
#   SYNTH_LAYERS=48 (default; 0 skips the synthetic model)  N_PROMPT=512  N_GEN=128
# Needs: .peers/gpu-bench (bench/run_gpu.sh --prepare) and the gguf package (carried in .gpudeps/py).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/sluice-gpu}
B=${BUILD_DIR:-build/gpu-direct}
mkdir -p "$OUT"
run_log="$OUT/run.log"
say() { echo "== $* ($(date -u +%H:%M:%S))" | tee -a "$run_log"; }

say "start"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  nvcc --version | tail -2
  g++ --version | head -1
} >> "$run_log" 2>&1
say "build"
( time bash bench/gpu/build.sh "$B" ) >> "$run_log" 2>&1 || say "build FAILED"

for t in act_quant_parity matmul_parity ops_parity model_parity; do
  say "$t"
  args=()
  # The golden fixtures and the models shipped in models/ (trained, not random).
  [ "$t" = model_parity ] && args=(tests/golden/fixtures $(ls models/*.gguf 2>/dev/null))
  timeout "${T_TEST:-150}" "$B/$t" "${args[@]}" > "$OUT/$t.h200.log" 2>&1
  rc=$?
  tail -1 "$OUT/$t.h200.log" | tee -a "$run_log"
  say "$t rc=$rc"
done

# The shipped small MoE (a trained qwen3moe, Q8_0): decode speed of a model far below the
# bandwidth limit, where launch overhead is all that is left.
small=$(ls models/sluice-moe-*.gguf 2>/dev/null | head -1)
if [ -n "$small" ]; then
  say "decode_bench $small"
  timeout 60 "$B/decode_bench" "$small" 128 128 > "$OUT/decode_bench_small.h200.log" 2>&1
  rc=$?
  cat "$OUT/decode_bench_small.h200.log" >> "$run_log"
  say "decode_bench small rc=$rc"
fi

L=${SYNTH_LAYERS:-48}
if [ "$L" != 0 ]; then
  say "synthetic qwen3-30b-a3b q4_k_m, $L layers"
  f=${SYNTH_FILE:-/tmp/q30-sluice.gguf}
  ( time PYTHONPATH=.gpudeps/py python3 tools/make_synthetic.py --shape qwen3-30b-a3b --mix q4_k_m --layers "$L" -o "$f" ) \
    >> "$run_log" 2>&1 || say "make_synthetic FAILED"
  say "decode_bench"
  timeout "${T_BENCH:-200}" "$B/decode_bench" "$f" "${N_PROMPT:-512}" "${N_GEN:-128}" > "$OUT/decode_bench.h200.log" 2>&1
  rc=$?
  cat "$OUT/decode_bench.h200.log" >> "$run_log"
  say "decode_bench rc=$rc"
fi
say "done"
