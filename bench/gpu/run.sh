#!/usr/bin/env bash
# bench/gpu/run.sh: everything GPU-side in one call, for the lent GPU machine (or any machine
# with nvcc and a GPU): builds with bench/gpu/build.sh (no CMake, no packages), runs the parity
# tests of tests/gpu, then times a decode of a synthetic Qwen3-30B-A3B-shaped (SYNTH_SHAPE) Q4_K_M file
# (tools/make_synthetic.py, with the gguf package carried in .gpudeps/py) through
# load_model_cuda. Logs go to $OUT (default /tmp/sluice-gpu): run.log, summary.txt and one log
# per program, named <program>.h200.log so they can be copied into tests/gpu/ as they are.
#   SYNTH_LAYERS=48 (default; 0 skips the synthetic model)  N_PROMPT=512  N_GEN=128
#   BUDGET_S=420: the whole script ends within this many seconds of its start (0: no budget).
#     Every step runs under `timeout`, capped so that the steps after it keep their reserve;
#     a step that runs out is killed and the script goes on with what it has.
#   SMALL=1: also time the shipped small MoE (models/sluice-moe-*.gguf).
#   T_TEST=150, T_BENCH=200: the caps per parity test and for the synthetic decode bench.
#   PLACEMENT_SYNTH=1: also run placement_parity (experts split VRAM / CPU) on the synthetic file,
#     at budgets 0, PLACEMENT_BUDGETS (default 2G,4G,8G) and everything, each split budget with
#     the PCIe shares PLACEMENT_SYNTH_SHARES (default cost,1: the cost model's split, all over PCIe).
#   KERNEL_BENCH=1: time the decode step's kernels (bench/gpu/kernel_bench.cu); NCU=1: and the
#     stall reasons of NCU_COUNT (4) launches of the kernels NCU_KERNELS names (default
#     regex:attention_kernel|route_topk) under Nsight Compute, kernel_bench running each kernel
#     3 + NCU_REPS (3) times.
#   WINDOW_BENCH=1: time a verify window's dense products on both matmul kernels, 1..16 rows
#     (bench/gpu/window_bench.cu).
#   DECODE_BENCH=0: skip decode_bench on the synthetic file (the whole model in VRAM).
#   SPLIT_BENCH=GIB: time the synthetic file's decode with its routed experts under that VRAM
#     budget: the cost model's split of the misses, no PCIe lane, 0.6 of them over PCIe, and the
#     cost model's split without the decode step's graph segments (bench/gpu/split_decode_bench.cu;
#     SPLIT_GEN tokens, SPLIT_ROUNDS rounds).
# Needs: .peers/gpu-bench/include (bench/run_gpu.sh --prepare) and the gguf package (.gpudeps/py).
# bench/gpu/session.sh is the one-call form for the lead (budget 420 s, sm_90, all cores).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/sluice-gpu}
B=${BUILD_DIR:-build/gpu-direct}
BUDGET=${BUDGET_S:-0}
mkdir -p "$OUT"
run_log="$OUT/run.log"
summary="$OUT/summary.txt"
t_start=$(date +%s)
: > "$summary"
say() { echo "== $* ($(date -u +%H:%M:%S), +$(( $(date +%s) - t_start )) s)" | tee -a "$run_log"; }
note() { echo "$*" | tee -a "$summary" >> "$run_log"; }

# cap DEFAULT RESERVE: seconds a step may take: DEFAULT, or less so that RESERVE seconds remain
# before the budget's end (at least 1, so the step still starts and reports that it ran out).
cap() {
  local want=$1 reserve=$2
  if [ "$BUDGET" -le 0 ]; then echo "$want"; return; fi
  local left=$(( BUDGET - ($(date +%s) - t_start) - reserve ))
  [ "$left" -lt 1 ] && left=1
  [ "$left" -lt "$want" ] && want=$left
  echo "$want"
}

# Reserves (s), counted from the end of the budget: what the later steps need at least. Sized for
# a 420 s budget; rs scales one down for a smaller budget (a 220 s call), so that the early steps
# do not get a cap of 1 s.
rs() { if [ "$BUDGET" -gt 0 ] && [ "$BUDGET" -lt 420 ]; then echo $(( $1 * BUDGET / 420 )); else echo "$1"; fi; }
R_BENCH=${R_BENCH:-$(rs 80)}   # the synthetic decode bench (load ~5 s, prefill x2, 2 x 128 steps) and the end
R_END=10                    # summary and slack (a killed step may take 5 s more)

say "start (budget ${BUDGET} s)"
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv
  nvcc --version | tail -2
  g++ --version | head -1
  nproc
} >> "$run_log" 2>&1
note "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1), $(nproc) cores"
note "tree: ${TREE:-$(git rev-parse --short HEAD 2>/dev/null || echo 'no git')} $(date -u +%Y-%m-%dT%H:%M:%SZ)"

# The synthetic file is written in the background while the build runs (python and the disk,
# not the compilers' cores).
L=${SYNTH_LAYERS:-48}
SHAPE=${SYNTH_SHAPE:-qwen3-30b-a3b}   # any --shape of tools/make_synthetic.py (qwen3.6-35b-a3b: the hybrid)
f=${SYNTH_FILE:-/tmp/$SHAPE-sluice.gguf}
synth_pid=
if [ "$L" != 0 ]; then
  say "synthetic $SHAPE q4_k_m, $L layers (background)"
  ( PYTHONPATH=.gpudeps/py timeout -k 5 "$(cap 240 "$R_BENCH")" python3 tools/make_synthetic.py \
      --shape "$SHAPE" --mix q4_k_m --layers "$L" -o "$f" > "$OUT/make_synthetic.log" 2>&1
    echo "make_synthetic rc=$?" >> "$OUT/make_synthetic.log" ) &
  synth_pid=$!
fi

# Two small hybrid files (qwen3next Q4_K_M and qwen35moe Q8_0, tiny shapes, 4 layers; ~10 s):
# model_parity and placement_parity run the hybrids' quantised CUDA path on them (the golden
# hybrid fixtures are F32). A third, qwen3moe Q4_K_M (tiny, 4 layers), gives model_parity a
# plain-attention model with 256-wide blocks: the golden fixtures are 64 wide, too narrow for
# K-quants, so the split attention's int8 blocks for a K-quant wo were checked only by
# ops_parity and decode tokens before. HYBRID_SYNTH=0 skips all three.
hy_files=()
hy_pid=
if [ "${HYBRID_SYNTH:-1}" = 1 ]; then
  hy_files=(/tmp/qn-tiny-sluice.gguf /tmp/q36-tiny-sluice.gguf /tmp/q3moe-tiny-sluice.gguf)
  ( PYTHONPATH=.gpudeps/py timeout -k 5 120 python3 tools/make_synthetic.py --shape qwen3-next-80b-a3b --mix q4_k_m \
      --tiny --layers 4 -o "${hy_files[0]}"
    PYTHONPATH=.gpudeps/py timeout -k 5 120 python3 tools/make_synthetic.py --shape qwen3.6-35b-a3b --mix q8_0 \
      --tiny --layers 4 -o "${hy_files[1]}"
    PYTHONPATH=.gpudeps/py timeout -k 5 120 python3 tools/make_synthetic.py --shape qwen3-30b-a3b --mix q4_k_m \
      --tiny --layers 4 -o "${hy_files[2]}" ) >> "$OUT/hybrid_synthetic.log" 2>&1 &
  hy_pid=$!
fi

say "build"
t0=$(date +%s)
# The tests and the bench need at least ~2 minutes after the build.
timeout -k 5 "$(cap 300 $(rs $(( R_BENCH + 60 ))))" bash bench/gpu/build.sh "$B" >> "$run_log" 2>&1
rc=$?
note "build: rc=$rc in $(( $(date +%s) - t0 )) s"
say "build rc=$rc"

run_step() {   # run_step NAME LOG CAP RESERVE COMMAND...: one program under its deadline
  local name=$1 log=$2 want=$3 reserve=$4
  shift 4
  if [ ! -x "$1" ]; then note "$name: not built"; return; fi
  local c; c=$(cap "$want" "$reserve")
  say "$name (cap $c s)"
  local t0; t0=$(date +%s)
  timeout -k 5 "$c" "$@" > "$log" 2>&1
  local rc=$?
  local why=""
  [ $rc = 124 ] || [ $rc = 137 ] && why=" (ran out of its $c s)"
  note "$name: rc=$rc$why in $(( $(date +%s) - t0 )) s, $(grep -c '^PASS' "$log") PASS / $(grep -c '^FAIL' "$log") FAIL lines: $(grep -v '^$' "$log" | tail -1)"
}

# The host side of a step (bench/gpu/step_overhead.cu: syncs, graph launches, the logits copy):
# a few seconds; its lines go into the summary.
if [ -x "$B/step_overhead" ]; then
  say "step_overhead"
  timeout -k 5 "$(cap 30 $(rs $(( R_BENCH + 200 ))))" "$B/step_overhead" 200 > "$OUT/step_overhead.log" 2>&1
  note "step_overhead: rc=$?"
  cat "$OUT/step_overhead.log" >> "$summary"
  cat "$OUT/step_overhead.log" >> "$run_log" && rm -f "$OUT/step_overhead.log"
fi

# Parity tests, cheapest first. The golden fixtures and the models shipped in models/ (trained,
# not random) for model_parity.
run_step act_quant_parity "$OUT/act_quant_parity.h200.log" 30 $(rs $(( R_BENCH + 150 ))) "$B/act_quant_parity"
run_step ops_parity "$OUT/ops_parity.h200.log" 60 $(rs $(( R_BENCH + 120 ))) "$B/ops_parity"
# act_quant_parity's log goes into run.log (the lent machine returns 8 files at most).
cat "$OUT/act_quant_parity.h200.log" >> "$run_log" 2>/dev/null && rm -f "$OUT/act_quant_parity.h200.log"
# The Gated DeltaNet kernels; appended to ops_parity's log.
run_step delta_net_parity "$OUT/delta_net_parity.log" 60 $(rs $(( R_BENCH + 100 ))) "$B/delta_net_parity"
{ echo "---- $B/delta_net_parity"; cat "$OUT/delta_net_parity.log"; } >> "$OUT/ops_parity.h200.log" 2>/dev/null
rm -f "$OUT/delta_net_parity.log"
run_step matmul_parity "$OUT/matmul_parity.h200.log" "${T_TEST:-150}" $(rs $(( R_BENCH + 60 ))) "$B/matmul_parity"
# A window's dense products, dp4a against tensor cores, 1..16 rows (WINDOW_BENCH=1).
if [ "${WINDOW_BENCH:-0}" = 1 ]; then
  run_step window_bench "$OUT/window_bench.h200.log" 90 $(rs $(( R_BENCH + 60 ))) "$B/window_bench" 30
fi

# The decode step's kernels one at a time (bench/gpu/kernel_bench.cu; KERNEL_BENCH=0 skips), and
# with NCU=1 (default) the warp stall reasons of the small ones under Nsight Compute, appended.
if [ "${KERNEL_BENCH:-1}" = 1 ]; then
  run_step kernel_bench "$OUT/kernel_bench.h200.log" 60 $(rs $(( R_BENCH + 60 ))) "$B/kernel_bench" 200
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  if [ "${NCU:-1}" = 1 ] && [ -n "$ncu" ]; then
    say "ncu on kernel_bench"
    timeout -k 5 "$(cap 60 $(rs $(( R_BENCH + 60 ))))" "$ncu" --clock-control none \
      -k "${NCU_KERNELS:-regex:attention_kernel|route_topk}" --launch-count "${NCU_COUNT:-4}" \
      --section SpeedOfLight --section WarpStateStats --section SchedulerStats --section LaunchStats \
      --section MemoryWorkloadAnalysis --section SourceCounters \
      "$B/kernel_bench" "${NCU_REPS:-3}" >> "$OUT/kernel_bench.h200.log" 2>&1
    note "ncu kernel_bench: rc=$?"
  fi
fi
if [ -n "$hy_pid" ]; then
  wait "$hy_pid"
  cat "$OUT/hybrid_synthetic.log" >> "$run_log" 2>/dev/null && rm -f "$OUT/hybrid_synthetic.log"
  hy_ok=()
  for h in "${hy_files[@]}"; do [ -s "$h" ] && hy_ok+=("$h"); done
  note "hybrid synthetic files: ${#hy_ok[@]} of ${#hy_files[@]}"
  hy_files=("${hy_ok[@]}")
fi
run_step model_parity "$OUT/model_parity.h200.log" "${T_TEST:-150}" "$R_BENCH" \
  "$B/model_parity" tests/golden/fixtures $(ls models/*.gguf 2>/dev/null) "${hy_files[@]}"
# The hybrids' MTP head on the GPU against the CPU's, and drafted = serial; appended to
# model_parity's log.
run_step mtp_parity "$OUT/mtp_parity.log" 120 "$R_BENCH" "$B/mtp_parity"
{ echo "---- $B/mtp_parity"; cat "$OUT/mtp_parity.log"; } >> "$OUT/model_parity.h200.log" 2>/dev/null
rm -f "$OUT/mtp_parity.log"

# Experts split between VRAM and the CPU lane (issue 10): the qwen3moe / qwen2moe fixtures at
# budgets 0, 2 experts a layer, half (profiled) and everything, against the CPU model's bits.
run_step placement_parity "$OUT/placement_parity.h200.log" "${T_TEST:-150}" "$R_BENCH" "$B/placement_parity"
# ... and a hybrid (its MoE FFN takes the same lanes), appended: the Q8_0 file, whose layers all
# have the same expert size (placement_parity's whole-layer check assumes it; Q4_K_M gives some
# layers Q6_K experts).
hy_q8=$(printf '%s\n' "${hy_files[@]}" | grep q36 | head -1)
if [ -n "$hy_q8" ]; then
  run_step placement_parity_hybrid "$OUT/placement_parity_hybrid.log" "${T_TEST:-150}" "$R_BENCH" \
    "$B/placement_parity" "$hy_q8"
  { echo "---- $B/placement_parity $hy_q8"; cat "$OUT/placement_parity_hybrid.log"; } >> "$OUT/placement_parity.h200.log" 2>/dev/null
  rm -f "$OUT/placement_parity_hybrid.log"
fi

if [ -n "$synth_pid" ]; then
  say "waiting for make_synthetic"
  wait "$synth_pid"
  note "make_synthetic: $(tail -1 "$OUT/make_synthetic.log")"
  cat "$OUT/make_synthetic.log" >> "$run_log" && rm -f "$OUT/make_synthetic.log"   # in run.log: one file fewer to return
  # The file's dirty pages written out before anything is timed: the kernel's writeback of tens
  # of GB competes with the CPU lane for cores and memory bandwidth.
  t_sync=$(date +%s); sync; note "sync after make_synthetic: $(( $(date +%s) - t_sync )) s"
  if [ -s "$f" ]; then
    if [ "${DECODE_BENCH:-1}" = 1 ]; then
      run_step decode_bench "$OUT/decode_bench.h200.log" "${T_BENCH:-200}" "$R_END" \
        "$B/decode_bench" "$f" "${N_PROMPT:-512}" "${N_GEN:-128}"
      cat "$OUT/decode_bench.h200.log" >> "$run_log" 2>/dev/null
      grep '^{' "$OUT/decode_bench.h200.log" >> "$summary" 2>/dev/null
    fi
    # SPLIT_BENCH=GIB: the file's decode with its routed experts under that budget, four
    # configurations (split_decode_bench.cu).
    if [ -n "${SPLIT_BENCH:-}" ]; then
      run_step split_decode_bench "$OUT/split_decode_bench.h200.log" "${T_BENCH:-200}" "$R_END" \
        "$B/split_decode_bench" "$f" "$SPLIT_BENCH" "${N_PROMPT:-512}" "${SPLIT_GEN:-32}" "${SPLIT_ROUNDS:-3}"
      grep '^{' "$OUT/split_decode_bench.h200.log" >> "$summary" 2>/dev/null
    fi
    # The synthetic file split at budgets 0, PLACEMENT_BUDGETS and everything (PLACEMENT_SYNTH=0
    # skips it): bits against the CPU model, hit rate, per-lane times and decode tok/s of each.
    if [ "${PLACEMENT_SYNTH:-1}" = 1 ]; then
      # Its log goes to the end of placement_parity's (the lent machine returns 8 files at most).
      export PLACEMENT_BUDGETS=${PLACEMENT_BUDGETS:-2G,4G,8G}
      export PLACEMENT_SHARES=${PLACEMENT_SYNTH_SHARES:-cost,1}
      run_step placement_parity_synth "$OUT/placement_parity_synth.log" "${T_TEST:-150}" "$R_END" \
        "$B/placement_parity" "$f"
      grep -E '^(PASS|FAIL)' "$OUT/placement_parity_synth.log" >> "$summary" 2>/dev/null
      { echo "---- $B/placement_parity $f"; cat "$OUT/placement_parity_synth.log"; } >> "$OUT/placement_parity.h200.log" 2>/dev/null
      rm -f "$OUT/placement_parity_synth.log"
    fi
  else
    note "decode_bench: no synthetic file"
  fi
fi

# The shipped small MoE (a trained qwen3moe, Q8_0): decode speed of a model far below the
# bandwidth limit, where launch overhead is all that is left. Last: it is the least needed.
small=$(ls models/sluice-moe-*.gguf 2>/dev/null | head -1)
if [ "${SMALL:-1}" = 1 ] && [ -n "$small" ]; then
  run_step decode_bench_small "$OUT/decode_bench_small.h200.log" 60 "$R_END" "$B/decode_bench" "$small" 128 128
  grep '^{' "$OUT/decode_bench_small.h200.log" >> "$summary" 2>/dev/null
fi
say "done"
note "total: $(( $(date +%s) - t_start )) s"
