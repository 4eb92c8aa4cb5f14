#!/usr/bin/env bash
# bench/gpu/profile.sh: where the GPU forward's time goes, kernel by kernel, on the lent H200.
# The `run` call (a fresh machine; ~4 minutes):
#
#   run(kind="nvidia-h200", timeout_s=420, carry=[".peers/gpu-bench/include", ".gpudeps/py"],
#       command="OUT=$OUT bash bench/gpu/profile.sh")
#
# Builds with bench/gpu/build.sh, writes a synthetic Qwen3-30B-A3B-shaped Q4_K_M file of
# PROFILE_LAYERS layers (default 8: every layer is the same shape, so 8 show the per-layer cost),
# times decode_bench on it plainly, then runs it again under Nsight Compute (ncu) once per phase
# with the duration and DRAM bytes of each kernel (each kernel alone, caches flushed between
# them: weights never fit in L2 in a decode step anyway) and summarises each CSV with
# bench/gpu/profile_summary.py: time per kernel name and launch shape for the prefill, one
# decode step and one 8-row verify window, and the bandwidth each reached.
# $OUT gets: summary.txt (the tables), decode_bench.log, ncu.tar.gz (the three CSVs), run.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/sluice-profile}
B=${BUILD_DIR:-build/gpu-direct}
L=${PROFILE_LAYERS:-8}
NP=${PROFILE_PROMPT:-512}
f=/tmp/q30-profile.gguf
mkdir -p "$OUT"
log="$OUT/run.log"
t_start=$(date +%s)
say() { echo "== $* (+$(( $(date +%s) - t_start )) s)" | tee -a "$log"; }

say "synthetic ($L layers, background) and build"
( PYTHONPATH=.gpudeps/py timeout -k 5 200 python3 tools/make_synthetic.py --shape qwen3-30b-a3b --mix q4_k_m \
    --layers "$L" -o "$f" >> "$log" 2>&1 ) &
synth=$!
CUDA_ARCH=90 JOBS=$(nproc) timeout -k 5 240 bash bench/gpu/build.sh "$B" >> "$log" 2>&1
say "build rc=$?"
wait "$synth"
[ -s "$f" ] || { say "no synthetic file"; exit 1; }
say "decode_bench plain"
timeout -k 5 60 "$B/decode_bench" "$f" "$NP" 32 > "$OUT/decode_bench.log" 2>&1
say "decode_bench rc=$?"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { say "no ncu"; exit 1; }
say "ncu ($ncu)"
# Each phase in its own run, bracketed by decode_bench (DECODE_BENCH_PROFILE): every kernel of
# the prefill, of one decode step (no graph: the same kernels) and of one 8-row window.
for phase in decode window prefill; do
  DECODE_BENCH_PROFILE=$phase timeout -k 5 "${NCU_CAP_S:-100}" "$ncu" --clock-control none --profile-from-start off \
    --csv --page raw --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size \
    "$B/decode_bench" "$f" "$NP" 2 > "$OUT/ncu_$phase.csv" 2>> "$log"
  say "ncu $phase rc=$?"
  python3 bench/gpu/profile_summary.py "$OUT/ncu_$phase.csv" --layers "$L" --title "$phase" >> "$OUT/summary.txt" 2>> "$log"
done
tar czf "$OUT/ncu.tar.gz" -C "$OUT" ncu_decode.csv ncu_window.csv ncu_prefill.csv && rm -f "$OUT"/ncu_*.csv
cat "$OUT/decode_bench.log" >> "$OUT/summary.txt"
say "done"
