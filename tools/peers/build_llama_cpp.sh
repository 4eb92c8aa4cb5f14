#!/usr/bin/env bash
# tools/peers/build_llama_cpp.sh: build llama.cpp (the peer we benchmark against) from the
# llama.cpp vendored in the llama-cpp-python source package, into .peers/ (git-ignored).
#
#   tools/peers/build_llama_cpp.sh                     CPU build: download sdist, unpack, build
#   tools/peers/build_llama_cpp.sh --cuda              CUDA build for sm_90 (H100/H200)
#   tools/peers/build_llama_cpp.sh --sdist FILE        use an already-downloaded sdist (or a slim
#                                                      tarball made by --pack): no network needed
#   tools/peers/build_llama_cpp.sh --pack FILE         write a slim source tarball (no docs, no
#                                                      vocab models; ~15 MB) to carry to a machine
#                                                      without network, then exit
#   tools/peers/build_llama_cpp.sh --configure-only    stop after cmake's configure step
#   options: --jobs N (default: nproc), --with-cli (also llama-cli, which needs the server code)
#
# Binaries end up in .peers/llama.cpp-py<version>-<cpu|cuda>/bin/ (llama-bench, llama-completion,
# llama-cli with --with-cli); the last line printed is that bin folder. Static libraries, so the
# bin folder can be copied elsewhere. Only the named targets are built: no tests, no examples.
set -euo pipefail

version=0.3.36                      # llama-cpp-python; its vendored llama.cpp is the peer
root=$(cd "$(dirname "$0")/../.." && pwd)
peers=$root/.peers
cuda=0 configure_only=0 with_cli=0 sdist="" pack="" jobs=$(nproc)

die() { echo "build_llama_cpp.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --cuda) cuda=1 ;;
    --sdist) [ $# -ge 2 ] || die "--sdist needs a path"; sdist=$2; shift ;;
    --pack) [ $# -ge 2 ] || die "--pack needs a path"; pack=$2; shift ;;
    --configure-only) configure_only=1 ;;
    --with-cli) with_cli=1 ;;
    --jobs) [ $# -ge 2 ] || die "--jobs needs a number"; jobs=$2; shift ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
command -v cmake >/dev/null || die "cmake not found"
mkdir -p "$peers"

# 1. The source package: given, cached in .peers/dl, or downloaded with pip.
if [ -z "$sdist" ]; then
  sdist=$peers/dl/llama_cpp_python-$version.tar.gz
  if [ ! -f "$sdist" ]; then
    echo "build_llama_cpp.sh: downloading llama-cpp-python==$version (source package)" >&2
    python3 -m pip download --quiet --disable-pip-version-check --no-binary :all: --no-deps \
      "llama-cpp-python==$version" -d "$peers/dl"
  fi
fi
[ -f "$sdist" ] || die "source package not found: $sdist"
sdist=$(cd "$(dirname "$sdist")" && pwd)/$(basename "$sdist")

# 2. Unpack once (keyed by the tarball's name and size, so a different file unpacks afresh).
key=$(basename "$sdist" .tar.gz)-$(stat -c %s "$sdist")
unpacked=$peers/src/$key
if [ ! -f "$unpacked/.complete" ]; then
  rm -rf "$unpacked"; mkdir -p "$unpacked"
  tar -xzf "$sdist" -C "$unpacked"
  touch "$unpacked/.complete"
fi
# The llama.cpp tree: vendor/llama.cpp in the sdist, top level in a --pack tarball.
src=$(find "$unpacked" -maxdepth 4 -type f -name CMakeLists.txt -path '*llama.cpp/CMakeLists.txt' \
      -printf '%h\n' | head -n1)
if [ -z "$src" ] || [ ! -d "$src/ggml" ]; then
  die "no llama.cpp source tree (CMakeLists.txt + ggml/) in $sdist"
fi

if [ -n "$pack" ]; then
  # Everything the CPU and CUDA builds need; docs, vocab GGUFs, media, git metadata, benchmark
  # logs, the web UI and the other backends' sources stay behind (12 -> ~6 MB: the GPU machine
  # takes 64 MiB a call, the tree included).
  excludes=(docs 'models/*.gguf' media '.git*' 'tools/server/public*' tools/ui benches vendor/miniaudio/miniaudio.h)
  for b in opencl vulkan hexagon sycl cann musa metal webgpu zdnn kompute rpc blas; do
    excludes+=("ggml/src/ggml-$b")
  done
  tar -czf "$pack" -C "$(dirname "$src")" "${excludes[@]/#/--exclude=llama.cpp/}" "$(basename "$src")"
  echo "build_llama_cpp.sh: wrote $pack ($(du -h "$pack" | cut -f1))" >&2
  exit 0
fi

# 3. Configure: only what llama-bench and the CLI need; nothing that reaches the network.
flavour=cpu
cmake_args=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_APP=OFF
  -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF
  -DGGML_NATIVE=ON)
if [ $cuda = 1 ]; then
  flavour=cuda
  command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] || die "--cuda: nvcc not found"
  cmake_args+=(-DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90)
  command -v nvcc >/dev/null || cmake_args+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
if [ $with_cli = 1 ]; then cmake_args+=(-DLLAMA_BUILD_SERVER=ON); else cmake_args+=(-DLLAMA_BUILD_SERVER=OFF); fi
build=$peers/llama.cpp-py$version-$flavour
# A build folder configured from another unpacked source cannot be reused: start it afresh.
if [ -f "$build/CMakeCache.txt" ] && ! grep -qxF "CMAKE_HOME_DIRECTORY:INTERNAL=$src" "$build/CMakeCache.txt"; then
  rm -rf "$build"
fi
echo "build_llama_cpp.sh: configuring $src -> $build" >&2
cmake -S "$src" -B "$build" "${cmake_args[@]}" >"$build.configure.log" 2>&1 \
  || { tail -n 30 "$build.configure.log" >&2; die "cmake configure failed (log: $build.configure.log)"; }
if [ $configure_only = 1 ]; then
  echo "build_llama_cpp.sh: configured (log: $build.configure.log); not building" >&2
  echo "$build"
  exit 0
fi

# 4. Build the named targets only.
targets=(llama-bench llama-completion)
[ $with_cli = 1 ] && targets+=(llama-cli)
echo "build_llama_cpp.sh: building ${targets[*]} with $jobs jobs" >&2
start=$(date +%s)
cmake --build "$build" --target "${targets[@]}" -j "$jobs"
echo "build_llama_cpp.sh: built in $(( $(date +%s) - start )) s" >&2
for t in "${targets[@]}"; do [ -x "$build/bin/$t" ] || die "missing $build/bin/$t after the build"; done
echo "$build/bin"
