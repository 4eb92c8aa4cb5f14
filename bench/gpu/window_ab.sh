#!/usr/bin/env bash
# bench/gpu/window_ab.sh: a verify window's cost curve (sluice bench --windows 1,2,3,4,8,16 at 16
# threads, depth 256) for a base tree and the working tree on the GPU machine's 16-core host, in
# one call: both built CPU-only side by side, then timed alternately, twice. The model is a
# SmolLM2-135M-Instruct Q4_1 clone (tools/shape_clone.py: the real header and real blocks in
# another order, so its timings are the real model's), because the real file (98 MB) does not
# fit a call's 64 MiB. Session 34 ran exactly this (bench/RESULTS.md).
#
#   (here)  bash bench/gpu/ab.sh --prepare BASE     -> .peers/old-tree
#           python3 tools/shape_clone.py pack SMOLLM2_GGUF .peers/smol.npz
#   run(carry=[".peers/gpu-bench/include", ".peers/gpu-bench/lib", ".peers/gpu-bench/bin",
#              ".gpudeps/py", ".peers/old-tree", ".peers/smol.npz"],
#       command="bash bench/gpu/window_ab.sh")      (~110 s on a fresh machine)
set -uo pipefail
cd "$(dirname "$0")/../.."
b=$PWD/.peers/gpu-bench
args=(-DCMAKE_BUILD_TYPE=Release -DSLUICE_TESTS=OFF -DSLUICE_CUDA=OFF -DCMAKE_PREFIX_PATH="$b" -DHTTPLIB_INCLUDE_DIR="$b/include")
command -v ninja > /dev/null && args+=(-G Ninja)
command -v pkg-config > /dev/null || args+=(-DPKG_CONFIG_EXECUTABLE="$b/bin/pkg-config")
(cmake -S .peers/old-tree -B /tmp/bb "${args[@]}" > /tmp/bbc.log 2>&1 &&
  cmake --build /tmp/bb --target sluice_cli -j 8 > /tmp/bb.log 2>&1; echo "base rc=$?") &
(cmake -S . -B /tmp/bt "${args[@]}" > /tmp/btc.log 2>&1 &&
  cmake --build /tmp/bt --target sluice_cli -j 8 > /tmp/bt.log 2>&1; echo "tree rc=$?") &
PYTHONPATH=.gpudeps/py python3 tools/shape_clone.py unpack .peers/smol.npz /tmp/smol.gguf
wait
lscpu | grep -E "Model name|^CPU\(s\)"
for r in 1 2; do
  for x in /tmp/bb /tmp/bt; do
    echo "## $x (run $r)"
    $x/sluice bench /tmp/smol.gguf -t 16 -p 0 -n 32 -d 256 --windows 1,2,3,4,8,16 --spec-windows 0 -r 3 --no-probe 2>&1 |
      grep -E "^(tg|win)"
  done
done
