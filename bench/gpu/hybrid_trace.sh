#!/usr/bin/env bash
# bench/gpu/hybrid_trace.sh: where the hybrid Qwen shapes' decode step goes on the GPU, in one
# device call (~4 minutes on a fresh machine):
#
#   run(timeout_s=560, carry=[".peers/gpu-bench/include", ".gpudeps/py"],
#       command="OUT=$OUT bash bench/gpu/hybrid_trace.sh")
#
# Two builds at once (bench/gpu/build.sh, plain and STEP_TRACE=1) while the synthetic 8-layer
# Qwen3.6-35B-A3B and Qwen3-Next-80B-A3B files are written (tools/make_synthetic.py, q4_k_m:
# 6 DeltaNet and 2 gated-attention layers each); then, on both files, decode_bench FILE 512 128
# (the whole model in VRAM) and step_trace FILE 512 32 with every kernel listed; with HT_NCU=1,
# Nsight Compute's warp states and SASS samples (bench/gpu/ncu_source.sh) for the first
# HT_NCU_COUNT (default 24: layer 0, a DeltaNet layer, and its MoE block) launches of a 35B decode
# step. $OUT gets summary.txt, decode.log, parity.log, trace_35b.log, trace_80b.log (and
# ncu_summary.txt, ncu_top.txt).
# HT_NCU=1 costs ~2.5 minutes more. HT_WINDOWS="4 8": step_trace also traces verify windows of
# those rows on each file after HT_WINDOW_DEPTHS (default "512") positions
# (trace_<shape>_w<rows>_d<depth>.log); HT_PROMPTS="512 4096": decode_bench after each prompt
# length (default 512); HT_30B=1 adds the 8-layer Qwen3-30B-A3B
# file (decode_bench and traces as the others). With .peers/old-tree carried (bench/gpu/ab.sh
# --prepare BASE), the base is built beside the tree and decode_bench runs on both builds (base
# first). The GPU parity tests (delta_net, ops, matmul without its timings, placement, mtp, and
# model on the golden fixtures) run on the tree in any case (parity.log).
set -uo pipefail
cd "$(dirname "$0")/../.."
O=${OUT:?OUT: the folder whose files come back}
mkdir -p "$O"
nvidia-smi -L > /dev/null 2>&1 || { echo "hybrid_trace.sh: no GPU here" | tee "$O/summary.txt"; exit 2; }
t0=$(date +%s)
say() { echo "== $* (+$(( $(date +%s) - t0 )) s)" | tee -a "$O/summary.txt"; }
f35=/tmp/q36-8-sluice.gguf
f80=/tmp/qn-8-sluice.gguf
f30=/tmp/q30-8-sluice.gguf
say "machine: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cores; tree $(git rev-parse --short HEAD 2>/dev/null)+$(git status --short 2>/dev/null | wc -l) changed"
(
  shapes="qwen3.6-35b-a3b:$f35"
  [ "${HT_80B:-1}" = 1 ] && shapes="$shapes qwen3-next-80b-a3b:$f80"   # HT_80B=0: the 35B file only
  [ "${HT_30B:-0}" = 1 ] && shapes="$shapes qwen3-30b-a3b:$f30"
  for s in $shapes; do
    s=${s/:/ }
    set -- $s
    [ -s "$2" ] || PYTHONPATH=.gpudeps/py timeout 200 python3 tools/make_synthetic.py --shape "$1" --mix q4_k_m \
      --layers 8 -o "$2" > /tmp/ht-synth.log 2>&1
  done
) &
synth=$!
trace=${HT_TRACE:-1}   # HT_TRACE=0: no trace build and no traces (~30 s less on a fresh machine)
[ "$trace" = 1 ] && (JOBS=6 CUDA_ARCH=90 STEP_TRACE=1 bash bench/gpu/build.sh /tmp/ht-trace > /tmp/ht-trace.log 2>&1) &
base=
if [ -d .peers/old-tree/src ]; then
  mkdir -p .peers/old-tree/.peers/gpu-bench && cp -r .peers/gpu-bench/include .peers/old-tree/.peers/gpu-bench/
  (cd .peers/old-tree && JOBS=$([ "$trace" = 1 ] && echo 5 || echo 7) CUDA_ARCH=90 bash bench/gpu/build.sh /tmp/ht-base \
     > /tmp/ht-base.log 2>&1; echo "base build rc=$?" >> /tmp/ht-base.log) &
  base=/tmp/ht-base
fi
JOBS=$([ "$trace" = 1 ] && echo 6 || echo 9) CUDA_ARCH=90 bash bench/gpu/build.sh /tmp/ht-plain > /tmp/ht-plain.log 2>&1
say "plain build rc=$?"
wait
for t in delta_net_parity ops_parity "matmul_parity --no-bench" placement_parity mtp_parity \
         "model_parity tests/golden/fixtures"; do
  echo "#### $t" >> "$O/parity.log"
  timeout 150 /tmp/ht-plain/$t >> "$O/parity.log" 2>&1; echo "rc=$?" >> "$O/parity.log"
done
grep -E "^####|rc=|^FAIL|PASS: |FAIL: |differ" "$O/parity.log" >> "$O/summary.txt"
say "trace build and files: $(ls -la $f35 $f80 $f30 2>&1 | awk '{print $5}' | tr '\n' ' ')"
tail -n 3 /tmp/ht-trace.log /tmp/ht-plain.log /tmp/ht-synth.log /tmp/ht-base.log >> "$O/summary.txt"
for f in $f35 $f80 $f30; do
  [ -s "$f" ] || continue
  for np in ${HT_PROMPTS:-512}; do
    for b in $base /tmp/ht-plain; do
      echo "#### $b decode_bench $f $np 128" >> "$O/decode.log"
      timeout 120 $b/decode_bench "$f" $np 128 >> "$O/decode.log" 2>&1
    done
  done
done
say "decode_bench done"
grep -E "^####|decode \(|prefill:|verify window" "$O/decode.log" >> "$O/summary.txt"
if [ "$trace" = 1 ]; then
  timeout 90 /tmp/ht-trace/step_trace $f35 512 32 400 > "$O/trace_35b.log" 2>&1
  timeout 90 /tmp/ht-trace/step_trace $f80 512 32 400 > "$O/trace_80b.log" 2>&1
  [ -s $f30 ] && timeout 90 /tmp/ht-trace/step_trace $f30 512 32 400 > "$O/trace_30b.log" 2>&1
  for w in ${HT_WINDOWS:-}; do
    for d in ${HT_WINDOW_DEPTHS:-512}; do
      for sf in 35b:$f35 80b:$f80 30b:$f30; do
        [ -s "${sf#*:}" ] && timeout 90 /tmp/ht-trace/step_trace "${sf#*:}" $d 16 400 "$w" \
          > "$O/trace_${sf%%:*}_w${w}_d$d.log" 2>&1
      done
    done
  done
  say "traces done"
  for t in "$O"/trace_*.log; do echo "$(basename $t): $(grep -h "a step" $t | tr '\n' ' ')" >> "$O/summary.txt"; done
fi
if [ "${HT_NCU:-0}" = 1 ]; then
  OUT=/tmp/ht-ncu NCU_FILE=$f35 NCU_BUILD=0 BUILD_DIR=/tmp/ht-plain NCU_KERNELS='regex:.' \
    NCU_COUNT=${HT_NCU_COUNT:-24} timeout 300 bash bench/gpu/ncu_source.sh > /dev/null 2>&1
  say "ncu rc=$?"
  cp /tmp/ht-ncu/summary.txt "$O/ncu_summary.txt" 2>/dev/null
  cp /tmp/ht-ncu/source_top.txt "$O/ncu_top.txt" 2>/dev/null
fi
say "done"
