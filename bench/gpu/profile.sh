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
# $OUT gets: summary.txt (the tables), decode_bench.log, ncu.tar.gz (the CSVs), run.log.
#
# PROFILE_KEEP=1 leaves the files (/tmp/<shape>-profile.gguf) for later runs in the same call.
# PROFILE_SHAPES (default qwen3-30b-a3b; a list, e.g. "qwen3-30b-a3b qwen3.6-35b-a3b": each
# shape's file, decode_bench and phases in turn), PROFILE_PHASES (default "decode window
# prefill"), NCU_CACHE (default all: caches flushed before each kernel; none: each kernel finds
# the L2 the kernel before it left, as in a real step, so a small kernel's time is its own work
# and not its cold reads: with the flush a one-block norm of 2048 floats measured 5.65 us).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/sluice-profile}
B=${BUILD_DIR:-build/gpu-direct}
L=${PROFILE_LAYERS:-8}
NP=${PROFILE_PROMPT:-512}
SHAPES=${PROFILE_SHAPES:-qwen3-30b-a3b}
PHASES=${PROFILE_PHASES:-decode window prefill}
CACHE=${NCU_CACHE:-all}
mkdir -p "$OUT"
log="$OUT/run.log"
t_start=$(date +%s)
say() { echo "== $* (+$(( $(date +%s) - t_start )) s)" | tee -a "$log"; }

say "synthetic files ($SHAPES, $L layers, background) and build"
synth=()
for shape in $SHAPES; do
  ( PYTHONPATH=.gpudeps/py timeout -k 5 200 python3 tools/make_synthetic.py --shape "$shape" --mix q4_k_m \
      --layers "$L" -o "/tmp/$shape-profile.gguf" >> "$log" 2>&1 ) &
  synth+=($!)
done
CUDA_ARCH=90 JOBS=$(nproc) timeout -k 5 240 bash bench/gpu/build.sh "$B" >> "$log" 2>&1
say "build rc=$?"
wait "${synth[@]}"
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || say "no ncu: decode_bench only"
csvs=()
for shape in $SHAPES; do
  f=/tmp/$shape-profile.gguf
  [ -s "$f" ] || { say "no synthetic file for $shape"; continue; }
  say "$shape: decode_bench plain"
  { echo "## $shape, $L layers"; timeout -k 5 60 "$B/decode_bench" "$f" "$NP" 32 2>&1; } >> "$OUT/decode_bench.log"
  say "decode_bench rc=$?"
  [ -n "$ncu" ] || continue
  # Each phase in its own run, bracketed by decode_bench (DECODE_BENCH_PROFILE): every kernel of
  # the prefill, of one decode step (no graph: the same kernels) and of one 8-row window.
  for phase in $PHASES; do
    csv=ncu_${shape}_$phase.csv
    DECODE_BENCH_PROFILE=$phase timeout -k 5 "${NCU_CAP_S:-100}" "$ncu" --clock-control none --cache-control "$CACHE" \
      --profile-from-start off --csv --page raw \
      --metrics gpu__time_duration.sum,dram__bytes_read.sum,launch__grid_size,launch__block_size \
      "$B/decode_bench" "$f" "$NP" 2 > "$OUT/$csv" 2>> "$log"
    say "ncu $shape $phase rc=$?"
    csvs+=("$csv")
    python3 bench/gpu/profile_summary.py "$OUT/$csv" --layers "$L" --title "$shape $phase (caches: $CACHE)" \
      >> "$OUT/summary.txt" 2>> "$log"
  done
  [ "${PROFILE_KEEP:-0}" = 1 ] || rm -f "$f"   # PROFILE_KEEP=1: left for the caller's own runs
done
[ ${#csvs[@]} -gt 0 ] && tar czf "$OUT/ncu.tar.gz" -C "$OUT" "${csvs[@]}" && (cd "$OUT" && rm -f "${csvs[@]}")
cat "$OUT/decode_bench.log" >> "$OUT/summary.txt"
say "done"
