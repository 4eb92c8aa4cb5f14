#!/usr/bin/env bash
# bench/gpu/ncu_source.sh: where inside a kernel a decode step's time goes, instruction by
# instruction (Nsight Compute's warp-state samples per SASS line), for the kernels step_trace
# ranks highest. The `run` call (a fresh machine or a warm one; ~3 minutes):
#
#   run(kind="nvidia-h200", timeout_s=420, carry=[".peers/gpu-bench/include", ".gpudeps/py"],
#       command="OUT=$OUT bash bench/gpu/ncu_source.sh")
#
# Builds with bench/gpu/build.sh, writes the Qwen3-30B-A3B-shaped Q4_K_M file cut to 4 layers,
# and profiles one decode step of decode_bench (DECODE_BENCH_PROFILE=decode) under ncu with the
# caches as the kernel before left them (--cache-control none: a small kernel's time is then its
# own work), the first NCU_COUNT launches matching NCU_KERNELS (default: layer 0's kernels but
# the output projection). $OUT gets: summary.txt (each
# kernel's duration and warp states), source_<n>.csv (the SASS of launch n with its samples,
# sorted by samples in source_top.txt), run.log.
# PY_DEPS (default .gpudeps/py): where the gguf package for tools/make_synthetic.py is.
# NCU_FILE: a model file already written (then no synthetic file); NCU_BUILD=0: BUILD_DIR is built
# already (bench/gpu/ab.sh runs it after its own builds). NCU_PHASE (default decode): the phase of
# decode_bench profiled, prefill for a 512-row chunk's kernels (e.g. with
# NCU_KERNELS='regex:mm_mma_kernel|attention_rows' NCU_COUNT=8: layer 0's tensor-core matmuls and
# its attention).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/sluice-ncu-source}
B=${BUILD_DIR:-build/gpu-direct}
KERNELS=${NCU_KERNELS:-regex:mm_float_col_kernel|mm_row_stream_kernel|rmsnorm_quant|attention_split}
COUNT=${NCU_COUNT:-6}   # layer 0: attention norm, attention, router, gate + up, down, residual + norm
f=${NCU_FILE:-/tmp/q30-4l-ncu.gguf}
mkdir -p "$OUT"
log="$OUT/run.log"
t_start=$(date +%s)
say() { echo "== $* (+$(( $(date +%s) - t_start )) s)" | tee -a "$log"; }

synth=
if [ -z "${NCU_FILE:-}" ]; then
  say "synthetic file (background)"
  ( PYTHONPATH=${PY_DEPS:-.gpudeps/py} timeout -k 5 200 python3 tools/make_synthetic.py --shape qwen3-30b-a3b \
      --mix q4_k_m --layers 4 -o "$f" >> "$log" 2>&1 ) &
  synth=$!
fi
if [ "${NCU_BUILD:-1}" = 1 ]; then
  CUDA_ARCH=90 JOBS=$(nproc) timeout -k 5 240 bash bench/gpu/build.sh "$B" >> "$log" 2>&1
  say "build rc=$?"
fi
[ -n "$synth" ] && wait "$synth"
[ -s "$f" ] || { say "no synthetic file"; exit 1; }
ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$ncu" ] || { say "no ncu"; exit 1; }
"$ncu" --version >> "$log" 2>&1
say "ncu: $KERNELS, $COUNT launches"
DECODE_BENCH_PROFILE=${NCU_PHASE:-decode} timeout -k 5 180 "$ncu" --clock-control none --cache-control none \
  --profile-from-start off -k "$KERNELS" --launch-count "$COUNT" --warp-sampling-interval 0 \
  --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats \
  -o "$OUT/prof" -f "$B/decode_bench" "$f" 512 2 >> "$log" 2>&1
say "ncu rc=$?"
"$ncu" --import "$OUT/prof.ncu-rep" --page details > "$OUT/summary.txt" 2>&1
# The source page of each profiled launch: SASS lines with their warp-state samples.
for n in $(seq 0 $(( COUNT - 1 ))); do
  "$ncu" --import "$OUT/prof.ncu-rep" --page source --csv --print-source sass --launch-skip "$n" --launch-count 1 \
    > "$OUT/source_$n.csv" 2>> "$log" || say "source page $n: rc=$?"
done
# The 40 lines with the most samples per launch (columns as ncu names them; a missing column
# leaves the CSVs to read by hand).
python3 - "$OUT" > "$OUT/source_top.txt" 2>&1 <<'EOF'
import csv, pathlib, sys
out = pathlib.Path(sys.argv[1])
for p in sorted(out.glob("source_*.csv")):
    rows = list(csv.reader(open(p, newline="", errors="replace")))
    head = next((i for i, r in enumerate(rows) if any("Source" in c for c in r)), None)
    if head is None:
        print(f"## {p.name}: no header ({len(rows)} rows)"); continue
    h = rows[head]
    col = next((i for i, c in enumerate(h) if c.strip() in ("Warp Stall Sampling (All Samples)", "Sampling Data (All)")), None)
    src = next(i for i, c in enumerate(h) if "Source" in c)
    print(f"## {p.name}: columns {h}")
    if col is None: continue
    body = [r for r in rows[head + 1:] if len(r) > max(col, src)]
    def num(s):
        try: return float(s.replace(",", ""))
        except ValueError: return 0.0
    total = sum(num(r[col]) for r in body) or 1.0
    for i, r in sorted(enumerate(body), key=lambda x: -num(x[1][col]))[:40]:
        print(f"{num(r[col]):8.0f} {100 * num(r[col]) / total:5.1f}%  line {i:5d}  {r[src].strip()[:110]}")
EOF
say "done"
