#!/usr/bin/env bash
# bench/gpu/budgets_and_cpu_tests.sh: the call that follows bench/run_gpu.sh on the same H200
# machine while it is still warm (the device tool keeps ignored build outputs and /tmp between
# calls a few seconds apart). It reuses run_gpu.sh's CUDA sluice build (build/gpu-bench), its
# llama.cpp CUDA build (.peers/llama.cpp-py0.3.36-cuda) and its synthetic file, and does two things:
#   1. experts split under a VRAM budget: for each budget, `sluice bench --gpu 0 --vram-budget B`
#      and llama.cpp with -ngl 99 -ncmoe N, N chosen so that llama.cpp holds the same share of the
#      routed expert bytes in VRAM as sluice did (N = layers - round(layers x resident / total),
#      from sluice's JSON; the experts of every layer are the same size);
#   2. the CPU unit tests built and run on this machine's Xeon (AVX-512): the lead's 2-core machine
#      may have AVX2 only, where every AVX-512 kernel test skips.
# The exact call, right after run_gpu.sh's:
#   run(kind="nvidia-h200", timeout_s=420, carry=[".peers/gpu-bench/include", ".peers/gpu-bench/lib",
#       ".peers/gpu-bench/bin", ".peers/gpu-gtest"],
#       command="OUT=$OUT BUDGET_S=400 bash bench/gpu/budgets_and_cpu_tests.sh")
# (the llama.cpp tarball stays behind: the tree, models included, and a whole .peers/gpu-bench
# would pass the device tool's 64 MiB; the llama.cpp build is already there)
# $OUT gets budgets.log (everything, the unit tests' summary included), manifest.json and one JSON
# per engine run (8 files at most: three budgets).
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$(pwd)
out=${OUT:-/tmp/sluice-budgets}
mkdir -p "$out"
budget_s=${BUDGET_S:-400}
budgets=${BUDGETS:-2G,4G,8G}
layers=${LAYERS:-48}
model=/tmp/sluice-bench-q30-${layers}l.gguf
sluice=$root/build/gpu-bench/sluice
llama_bin=$root/.peers/llama.cpp-py0.3.36-cuda/bin
bundle=$root/.peers/gpu-bench
threads=$(nproc)
exec > >(tee "$out/budgets.log") 2>&1
t0=$(date +%s)
left() { echo $(( budget_s - ($(date +%s) - t0) )); }
say() { echo "budgets [$(( $(date +%s) - t0 ))s]: $*"; }
cap() { local c=$1 l; l=$(( $(left) - $2 )); [ "$l" -lt "$c" ] && c=$l; [ "$c" -lt 1 ] && c=1; echo "$c"; }

say "$(nproc) cores; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); AVX-512 flags:" \
  "$(grep -m1 flags /proc/cpuinfo | tr ' ' '\n' | grep -E '^avx512(f|bw|vl|_vnni|_vbmi)$' | tr '\n' ' ')"
for need in "$model" "$sluice" "$llama_bin/llama-bench"; do
  [ -e "$need" ] || say "missing $need (run bench/run_gpu.sh in the call just before this one): its runs are skipped"
done
export PKG_CONFIG_PATH=$bundle/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# 2 (background, niced): the CPU unit tests, CPU-only Release build.
unit_args=(-DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA=OFF -DSLUICE_TESTS=ON -DCMAKE_PREFIX_PATH="$bundle"
  -DGTEST_ROOT="$root/.peers/gpu-gtest" -DHTTPLIB_INCLUDE_DIR="$bundle/include")
command -v pkg-config >/dev/null || unit_args+=(-DPKG_CONFIG_EXECUTABLE="$bundle/bin/pkg-config")
command -v ninja >/dev/null && unit_args+=(-G Ninja)
( timeout "$(cap 240 60)" cmake -S "$root" -B build/gpu-unit "${unit_args[@]}" > /tmp/unit_build.log 2>&1 \
  && timeout "$(cap 240 60)" nice -n 15 cmake --build build/gpu-unit --target sluice_unit_tests -j "$threads" >> /tmp/unit_build.log 2>&1
  echo "rc=$?" >> /tmp/unit_build.log ) &
unit_pid=$!

# 1: the budgets, one at a time.
rec=(python3 "$root/bench/record.py")
manifest=$out/manifest.json
rm -f "$manifest"
p=512 n=64
IFS=, read -r -a bs <<< "$budgets"
for b in "${bs[@]}"; do
  [ -x "$sluice" ] && [ -f "$model" ] || break
  f=sluice_$b.json
  say "sluice --gpu 0 --vram-budget $b"
  if timeout "$(cap 150 60)" "$sluice" bench "$model" -t "$threads" --gpu 0 --vram-budget "$b" -p $p -n $n -r 2 \
       --ctx 0 --windows 0 --spec-windows 0 --json > "$out/$f"; then
    "${rec[@]}" add "$manifest" --name "sluice GPU+CPU, budget $b" --engine sluice --file "$f" --placement experts-cpu \
      --command "sluice bench MODEL -t $threads --gpu 0 --vram-budget $b -p $p -n $n -r 2 --ctx 0 --windows 0 --spec-windows 0 --json"
    python3 - "$out/$f" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
pl = r.get("placement") or {}
print("placement:", json.dumps({k: pl.get(k) for k in ("resident_experts", "total_experts", "resident_bytes", "total_bytes")}),
      "hit rate", (pl.get("metrics") or {}).get("hit_rate"))
PY
  else
    say "sluice budget $b failed (rc $?)"; rm -f "$out/$f"; continue
  fi
  ncmoe=$(python3 -c "import json,sys; pl=json.load(open(sys.argv[1]))['placement']; print($layers - round($layers * pl['resident_bytes'] / pl['total_bytes']))" "$out/$f" 2>/dev/null || echo "")
  [ -n "$ncmoe" ] && [ -x "$llama_bin/llama-bench" ] || continue
  lf=llama_$b.json
  say "llama.cpp -ngl 99 -ncmoe $ncmoe (the same expert share as budget $b)"
  if timeout "$(cap 120 40)" "$root/tools/peers/run_llama_bench.sh" "$model" --bin "$llama_bin" -t "$threads" --ncmoe "$ncmoe" \
       -p $p -n $n -r 2 > "$out/$lf"; then
    "${rec[@]}" add "$manifest" --name "llama.cpp -ngl 99 -ncmoe $ncmoe" --engine llama.cpp --file "$lf" --placement experts-cpu \
      --command "llama-bench -m MODEL -t $threads -ngl 99 -ncmoe $ncmoe -p $p -n $n -r 2 (tools/peers/run_llama_bench.sh)"
    "${rec[@]}" compare "$manifest" "sluice GPU+CPU, budget $b" "llama.cpp -ngl 99 -ncmoe $ncmoe"
  else
    rm -f "$out/$lf"
  fi
done

# 2: wait for the unit tests' build, then run them (every test; the AVX-512 ones are the point).
say "waiting for the unit tests' build"
wait "$unit_pid"
tail -n 3 /tmp/unit_build.log
if [ -x build/gpu-unit/tests/sluice_unit_tests ]; then
  SLUICE_SOURCE_DIR=$root SLUICE_BINARY_DIR=$root/build/gpu-unit timeout "$(cap 150 5)" \
    build/gpu-unit/tests/sluice_unit_tests --gtest_brief=1 > /tmp/unit_run.log 2>&1
  rc=$?
  say "sluice_unit_tests: rc=$rc"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED" /tmp/unit_run.log | head -n 40
  # The ISA-parameterised kernel tests alone, so the log shows they ran here rather than skipped.
  SLUICE_SOURCE_DIR=$root SLUICE_BINARY_DIR=$root/build/gpu-unit timeout "$(cap 60 5)" \
    build/gpu-unit/tests/sluice_unit_tests --gtest_brief=1 --gtest_filter='*avx512*' 2>&1 | tail -n 6
else
  say "no unit test binary: the build log's tail"; tail -n 30 /tmp/unit_build.log
fi
[ -f "$manifest" ] && "${rec[@]}" report "$manifest" --model "synthetic Qwen3-30B-A3B shape, $layers layers, q4_k_m" \
  --scenario "gpu-budget/q30-${layers}l-q4_k_m" --title "H200 with a VRAM budget: sluice GPU+CPU vs llama.cpp --n-cpu-moe"
say "done"
