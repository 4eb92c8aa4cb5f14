#!/usr/bin/env bash
# bench/gpu/build.sh BUILD_DIR: builds the GPU parity tests (tests/gpu/*.cu) and the decode
# benchmark (bench/gpu/*.cu) with nvcc and g++ alone, no CMake and no Debian packages: fmt
# header-only and nlohmann from the folder bench/run_gpu.sh --prepare makes (.peers/gpu-bench). For the lent GPU machine,
# whose image has CUDA but none of the project's dependencies. Objects build in parallel.
#   CUDA_ARCH=90 (default) picks the target; JOBS defaults to the core count.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/gpu-direct}
arch=${CUDA_ARCH:-90}
jobs=${JOBS:-$(nproc)}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
cudainc=$(dirname "$(dirname "$nvcc")")/include
deps=.peers/gpu-bench/include                 # bench/run_gpu.sh --prepare makes it
[ -d "$deps" ] || deps=.gpudeps/include
mkdir -p "$out/obj"
failed=0   # a source that does not compile (or a program that does not link) fails the build at the
           # end, after everything else that can be built is: one broken file costs only what needs it
# E3: no contraction on either compiler.
cxxflags="-std=c++20 -O2 -ffp-contract=off -DFMT_HEADER_ONLY -DSLUICE_HAVE_CUDA=1 -Isrc -Iinclude -I$deps -I$cudainc"
nvflags="-std=c++17 -O2 --fmad=false -arch=sm_$arch -Xcompiler -ffp-contract=off -DFMT_HEADER_ONLY -Isrc -Iinclude -I$deps"
# STEP_TRACE=1: every kernel records when its wait began and returned (launch.cuh), for
# bench/gpu/step_trace.cu; a build for that program only (the others run, a little slower).
if [ "${STEP_TRACE:-0}" = 1 ]; then cxxflags="$cxxflags -DSLUICE_STEP_TRACE"; nvflags="$nvflags -DSLUICE_STEP_TRACE"; fi
srcs=$(ls src/core/*.cpp src/io/*.cpp src/quant/*.cpp src/kernels/cpu/*.cpp src/models/*.cpp src/moe/*.cpp src/kv/*.cpp 2>/dev/null)
# The placement layer the split model uses (cache, planner, metrics); not calibration.cpp, which
# needs the tokenizer layer this build does not compile.
srcs="$srcs $(ls src/placement/*.cpp 2>/dev/null | grep -v calibration)"
# The decoder, sampler and drafters mtp_parity runs (no tokenizer, no server).
srcs="$srcs src/runtime/generate.cpp src/runtime/sampler.cpp src/runtime/token_sha.cpp $(ls src/spec/*.cpp)"
cus=$(ls src/kernels/cuda/*.cu)
# INCREMENTAL=1 skips objects newer than their source (local iteration; headers not tracked).
stale() { [ "${INCREMENTAL:-0}" != 1 ] || [ ! -e "$2" ] || [ "$1" -nt "$2" ]; }
{
  for f in $srcs; do o=$out/obj/$(echo "$f" | tr / _).o; stale "$f" "$o" && echo "rm -f $o; g++ $cxxflags -c $f -o $o"; done
  for f in $cus; do o=$out/obj/$(echo "$f" | tr / _).o; stale "$f" "$o" && echo "rm -f $o; $nvcc $nvflags -c $f -o $o"; done
  true
} | xargs -r -P "$jobs" -I{} sh -c '{}' || { echo "build.sh: some objects failed to compile (see above); linking what can be linked"; failed=1; }
# One static library: each program pulls only the objects it needs, so a source file that did
# not compile costs only the programs that use it.
rm -f "$out/libsluice_gpu.a"
ar rcs "$out/libsluice_gpu.a" "$out"/obj/*.o
objs=$out/libsluice_gpu.a
# Each test and benchmark: compiled, then linked with the library.
# C++20 here: model_parity and decode_bench include models/model.h (std::span); CMake builds
# CUDA as C++17, where model_parity compiles to a skip.
nvflags=${nvflags/-std=c++17/-std=c++20}
{
  for f in tests/gpu/*.cu; do
    n=$(basename "$f" .cu)
    echo "$nvcc $nvflags $f $objs -o $out/$n -lpthread"
  done
  # Host-only tests (tests/gpu/*.cpp): g++, then linked by nvcc (the CUDA runtime).
  for f in tests/gpu/*.cpp; do
    n=$(basename "$f" .cpp)
    echo "g++ $cxxflags -c $f -o $out/obj_$n.o && $nvcc -arch=sm_$arch $out/obj_$n.o $objs -o $out/$n -lpthread"
  done
  for f in bench/gpu/*.cu; do
    n=$(basename "$f" .cu)
    echo "$nvcc $nvflags $f $objs -o $out/$n -lpthread"
  done
} | xargs -r -P "$jobs" -I{} sh -c '{}' || { echo "build.sh: some programs failed to link"; failed=1; }
ls -la "$out" | grep -v obj
exit "$failed"
