#!/usr/bin/env bash
# bench/gpu/session.sh: the lead's one call on a FRESH H200 machine. The exact `run` call:
#
#   run(kind="nvidia-h200", timeout_s=480,
#       carry=[".peers/gpu-bench/include", ".gpudeps/py"],
#       command="OUT=$OUT bash bench/gpu/session.sh")
#
# What travels: the tracked tree (~45 MB, models/ and the golden fixtures included) plus the
# two carried folders: .peers/gpu-bench/include (fmt header-only, nlohmann; 2.1 MB, made by
# bench/run_gpu.sh --prepare) and .gpudeps/py (the gguf package for tools/make_synthetic.py,
# 0.7 MB). Nothing else is needed: bench/gpu/build.sh uses nvcc and g++ only.
# What comes back in $OUT (8 files at most): summary.txt, run.log, make_synthetic.log,
# act_quant_parity / ops_parity / matmul_parity / model_parity / decode_bench .h200.log
# (the small-model bench is left out here to stay within 8 files and the budget).
#
# It builds for sm_90 only with every core, runs the four parity tests, writes the synthetic
# 48-layer Qwen3-30B-A3B-shaped Q4_K_M file (in the background, during the build) and times
# its decode (prefill 512, decode 128). Every step has a deadline: the script ends within
# 420 s of its start whatever happens, with what it has in summary.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."
export OUT=${OUT:-/tmp/sluice-gpu}
export BUDGET_S=${BUDGET_S:-420}
export CUDA_ARCH=90
export JOBS=$(nproc)
export SYNTH_LAYERS=${SYNTH_LAYERS:-48} N_PROMPT=${N_PROMPT:-512} N_GEN=${N_GEN:-128}
export SMALL=0
export BUILD_DIR=${BUILD_DIR:-build/gpu-direct}
exec bash bench/gpu/run.sh
