#!/usr/bin/env bash
# bench/run_gpu.sh: sluice and llama.cpp on one synthetic Qwen3-30B-A3B-shaped file on the GPU
# machine (one H200, 16 cores), which starts with nothing of ours installed and no network.
# Everything it needs travels in one ignored folder, made here first:
#
#   bench/run_gpu.sh --prepare        (here) fill .peers/gpu-bench: fmt/nlohmann/CLI11/httplib
#                                     headers, CMake configs for them, PCRE2 (static) and
#                                     cpp-httplib libraries, a pkg-config stand-in, the slim
#                                     llama.cpp source tarball and the gguf wheel (~15 MB)
#   bench/run_gpu.sh --dry-run        print the plan and check the folder; run nothing
#   bench/run_gpu.sh --local          test the CPU parts here: sluice built from the carried
#                                     folder only, a 2-layer file, the CPU llama.cpp in .peers/
#   bench/run_gpu.sh                  (GPU machine) the real run; carry=[".peers/gpu-bench"]
#
# Options: --layers N (default 48, the real model: 18.6 GB), --threads N (default nproc),
#   --router-skew X --router-locality X (default 0 0: even routing), --budget S (seconds the
#   whole script may take, default 585: the device tool's limit is 600), --record (append to
#   bench/RESULTS.md and bench/results.jsonl; the lead normally records from the fetched $OUT with
#   bench/record.py report $OUT/manifest.json ... --record), --sluice-bin PATH (a sluice already
#   built: no sluice build), --placement (issue 10's runs instead of the default ones: the whole
#   model in VRAM for both engines, then sluice --vram-budget 0/2G/4G/8G against llama.cpp
#   -ncmoe N, N the first layer whose routed experts onward fit that VRAM (for 30B: 48/42/36/24; 17.3 GB of
#   routed experts over 48 layers: ~0.36 GB a layer), prefill 512 and 4096, decode 64; the JSONs
#   are packed into results.tar.gz). --shape S (default qwen3-30b-a3b; also qwen3.6-35b-a3b and
#   qwen3-next-80b-a3b, the hybrids, and qwen3-235b-a22b: tools/make_synthetic.py's shapes, at
#   their real layer count unless --layers), --vram-budgets LIST (default 0,2G,4G,8G: each against
#   the llama.cpp -ncmoe whose VRAM experts fit it, bench/ncmoe_for_budget.py), --split-prompts
#   LIST (the budget runs' prompt lengths, default 512,4096), --spec-accept A (the budget runs
#   also decode by oracle-tape windows of 1 and 4 rows and by windows the depth policy sizes (up to 5 rows) at
#   acceptance A (a list: one run each), and, for a file with an MTP head, the same windows with the head drafting:
#   sluice bench's spec+mtp rows), --split-reps N
#   (repetitions of the budget runs, default 2: 1 leaves time for a 32K prompt), --no-whole (skip
#   the whole-model-in-VRAM pair of the placement runs), --long-prompt N (after every budget's
#   runs, a prefill of N tokens alone for each engine, once: a run that runs out of time loses
#   only that figure), --no-peer (no llama.cpp build or runs: sluice alone, for a call that
#   measures a change of ours), --sluice-chunk N (sluice's budget and long-prompt runs prefill in
#   N-row forwards instead of its default; llama.cpp keeps its own), --profile-text FILE (before
#   the budget runs, `sluice profile` counts the routing over the first --profile-tokens N (default
#   1024) tokens of FILE, a path in the repository, and writes <model>.profile.bin, which every
#   --vram-budget run then ranks its cache by: issue 10's calibration pass, as a user runs it),
#   --decode-depths LIST (the budget runs also decode after prompts of these lengths, default 0:
#   sluice in the same run, llama.cpp in a second llama-bench -p 0 -d run per budget),
#   --pack-peer (after the llama.cpp build, llama-bench comes back xz-compressed in 15 MiB parts,
#   $OUT/llama-bench.xz.NN; a later call that carries them as .peers/llama-pack/ unpacks them
#   instead of building: the build runs once a session, not once a call).
#
# On the GPU machine, in this order (the llama.cpp CUDA build, ~5.4 min on 16 cores, is the long
# pole; sluice's build and the model file are made beside it; nothing is timed while anything
# builds):
#   1. llama.cpp CUDA build (background), the gguf wheel + the synthetic file (background),
#      sluice Release with CUDA (one build for the CPU and the GPU runs: --gpu picks the
#      backend; CPU-only where there is no nvcc);
#   2. a standalone GPU bandwidth probe (src/runtime/roofline_cuda.cpp as a program, seconds);
#      then, one at a time, each under a timeout cut to the budget left, most important first:
#      sluice CPU (-t 16: pp512, tg64), llama.cpp CPU-only (the GPU hidden, -t 16: pp512, tg64),
#      llama.cpp full GPU (-ngl 99: pp512, tg128), llama.cpp -ncmoe 48 (every routed expert on
#      the CPU), sluice on the GPU when its `bench` has --gpu (CUDA build), and last sluice
#      CPU's extras (tg64 at depth 512, the window cost curve, oracle runs);
#   3. the ratio table (bench/record.py), last.
# $OUT gets at most 8 files: run_gpu.log (everything, build logs' tails included),
# manifest.json (with the GPU probe's figures) and one JSON per run (record.py reads them where
# they land).
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
bundle=$root/.peers/gpu-bench
mode=run layers="" threads=$(nproc) skew=0 locality=0 budget=585 record=0 prebuilt="" placement_runs=0
shape=qwen3-30b-a3b vram_budgets=0,2G,4G,8G split_prompts="" spec_accept="" split_reps=2 whole_runs=1 long_prompt=""
no_peer=0 sluice_chunk="" profile_text="" profile_tokens=1024 decode_depths=0 pack_peer=0
die() { echo "run_gpu.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --prepare) mode=prepare ;;
    --dry-run) mode=dry ;;
    --local) mode=local ;;
    --layers) layers=$2; shift ;;
    -t|--threads) threads=$2; shift ;;
    --router-skew) skew=$2; shift ;;
    --router-locality) locality=$2; shift ;;
    --budget) budget=$2; shift ;;
    --record) record=1 ;;
    --sluice-bin) prebuilt=$2; shift ;;
    --placement) placement_runs=1 ;;
    --shape) shape=$2; shift ;;
    --vram-budgets) vram_budgets=$2; shift ;;
    --split-prompts) split_prompts=$2; shift ;;
    --decode-depths) decode_depths=$2; shift ;;
    --pack-peer) pack_peer=1 ;;
    --spec-accept) spec_accept=$2; shift ;;
    --split-reps) split_reps=$2; shift ;;
    --no-whole) whole_runs=0 ;;
    --long-prompt) long_prompt=$2; shift ;;
    --no-peer) no_peer=1 ;;
    --sluice-chunk) sluice_chunk=$2; shift ;;
    --profile-text) profile_text=$2; shift ;;
    --profile-tokens) profile_tokens=$2; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d'; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
# The shape's real layer count (tools/synthetic_shapes.py) unless --layers says otherwise.
case $shape in
  qwen3-30b-a3b|qwen3-next-80b-a3b) real_layers=48 ;;
  qwen3.6-35b-a3b) real_layers=40 ;;
  qwen3-235b-a22b) real_layers=94 ;;
  *) die "--shape $shape: expected qwen3-30b-a3b, qwen3-next-80b-a3b, qwen3.6-35b-a3b or qwen3-235b-a22b" ;;
esac
[ -n "$layers" ] || { [ $mode = local ] && layers=2 || layers=$real_layers; }
[ -z "$profile_text" ] || [ -f "$root/$profile_text" ] || die "--profile-text $profile_text: no such file in the repository"
for v in layers threads budget profile_tokens; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v: expected a whole number, got '${!v}'"
done

# ---------------------------------------------------------------------------------------------
# --prepare: the carried folder, from this (Debian 12) machine's packages.
if [ $mode = prepare ]; then
  set -e
  rm -rf "$bundle"
  mkdir -p "$bundle"/{include,lib/pkgconfig,lib/cmake/fmt,lib/cmake/nlohmann_json,lib/cmake/CLI11,bin,wheels}
  for h in fmt nlohmann CLI httplib.h pcre2.h; do
    [ -e "/usr/include/$h" ] || die "--prepare: /usr/include/$h missing (apt-get install the -dev package)"
    cp -r "/usr/include/$h" "$bundle/include/"
  done
  lib=/usr/lib/x86_64-linux-gnu
  # PCRE2 as a static library only, so the link cannot pick a shared one that is not there.
  cp "$lib/libpcre2-8.a" "$bundle/lib/"
  pcre_version=$(pkg-config --modversion libpcre2-8 2>/dev/null || echo 10.42)
  cat > "$bundle/lib/pkgconfig/libpcre2-8.pc" <<EOF
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include
Name: libpcre2-8
Description: PCRE2 8-bit (static, carried by bench/run_gpu.sh)
Version: $pcre_version
Libs: -L\${libdir} -lpcre2-8
Cflags: -I\${includedir} -DPCRE2_STATIC
EOF
  # Debian's cpp-httplib is a header plus a shared library (and brotli beside it); the server
  # layer links it. libssl/libcrypto/libz are taken from the machine.
  for f in "$lib"/libcpp-httplib.so* "$lib"/libbrotli{common,dec,enc}.so*; do
    [ -e "$f" ] && cp -P "$f" "$bundle/lib/"
  done
  # Its other needs (libssl.so.3, libcrypto.so.3, libz.so.1) are not carried: 5.5 MB that the
  # 64 MiB carry limit cannot spare, and the image's Python needs them too (checked there).
  cat > "$bundle/lib/pkgconfig/cpp-httplib.pc" <<EOF
prefix=\${pcfiledir}/../..
libdir=\${prefix}/lib
includedir=\${prefix}/include
Name: cpp-httplib
Description: cpp-httplib (carried by bench/run_gpu.sh)
Version: $(pkg-config --modversion cpp-httplib 2>/dev/null || echo 0.11.4)
Libs: -L\${libdir} -lcpp-httplib
Cflags: -I\${includedir} -DCPPHTTPLIB_OPENSSL_SUPPORT -DCPPHTTPLIB_ZLIB_SUPPORT -DCPPHTTPLIB_BROTLI_SUPPORT
EOF
  # CMake package configs for the header-only libraries (fmt header-only: no libfmt.so there).
  cat > "$bundle/lib/cmake/fmt/fmt-config.cmake" <<'EOF'
# fmt, header-only, carried by bench/run_gpu.sh (the GPU image has no libfmt).
if(NOT TARGET fmt::fmt)
  add_library(fmt::fmt INTERFACE IMPORTED)
  set_target_properties(fmt::fmt PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../../include"
    INTERFACE_COMPILE_DEFINITIONS "FMT_HEADER_ONLY=1")
endif()
set(fmt_FOUND TRUE)
EOF
  cat > "$bundle/lib/cmake/nlohmann_json/nlohmann_json-config.cmake" <<'EOF'
# nlohmann/json headers, carried by bench/run_gpu.sh.
if(NOT TARGET nlohmann_json::nlohmann_json)
  add_library(nlohmann_json::nlohmann_json INTERFACE IMPORTED)
  set_target_properties(nlohmann_json::nlohmann_json PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../../include")
endif()
set(nlohmann_json_FOUND TRUE)
EOF
  cat > "$bundle/lib/cmake/CLI11/CLI11-config.cmake" <<'EOF'
# CLI11 headers, carried by bench/run_gpu.sh.
if(NOT TARGET CLI11::CLI11)
  add_library(CLI11::CLI11 INTERFACE IMPORTED)
  set_target_properties(CLI11::CLI11 PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "${CMAKE_CURRENT_LIST_DIR}/../../../include")
endif()
set(CLI11_FOUND TRUE)
EOF
  # A pkg-config for an image without one: reads the .pc files above (and PKG_CONFIG_PATH).
  cat > "$bundle/bin/pkg-config" <<'EOF'
#!/usr/bin/env python3
# A minimal pkg-config (carried by bench/run_gpu.sh for an image without one): what CMake's
# FindPkgConfig asks, from the .pc files on PKG_CONFIG_PATH/PKG_CONFIG_LIBDIR and ../lib/pkgconfig.
import os, re, sys
def dirs():
    d = []
    for var in ("PKG_CONFIG_PATH", "PKG_CONFIG_LIBDIR"):
        d += [x for x in os.environ.get(var, "").split(":") if x]
    return d + [os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib", "pkgconfig")]
def load(name):
    for d in dirs():
        path = os.path.join(d, name + ".pc")
        if os.path.isfile(path):
            v, f = {"pcfiledir": os.path.dirname(os.path.abspath(path))}, {}
            exp = lambda s: re.sub(r"\$\{(\w+)\}", lambda m: v.get(m.group(1), ""), s)
            for line in open(path):
                line = line.strip()
                m = re.match(r"^([\w.]+)\s*=\s*(.*)$", line)
                if m: v[m.group(1)] = exp(m.group(2)); continue
                m = re.match(r"^([\w.]+)\s*:\s*(.*)$", line)
                if m: f[m.group(1)] = exp(m.group(2))
            return v, f
    return None
args = sys.argv[1:]
flags = [a for a in args if a.startswith("--")]
names, skip = [], False
for a in (a for a in args if not a.startswith("--")):
    if skip: skip = False; continue
    if a in (">=", "<=", "=", ">", "<", "!="): skip = True; continue
    n = re.split(r"[<>=!]", a)[0].strip()
    if n: names.append(n)
if "--version" in flags: print("0.29.2"); sys.exit(0)
pcs = []
for n in names:
    pc = load(n)
    if pc is None:
        sys.stderr.write("Package %s was not found in the pkg-config search path.\n" % n); sys.exit(1)
    pcs.append(pc)
cf = " ".join(p[1].get("Cflags", "") for p in pcs).split()
lb = " ".join(p[1].get("Libs", "") for p in pcs).split()
if "--static" in flags: lb += " ".join(p[1].get("Libs.private", "") for p in pcs).split()
sel = {"--cflags": cf, "--cflags-only-I": [x for x in cf if x.startswith("-I")],
       "--cflags-only-other": [x for x in cf if not x.startswith("-I")], "--libs": lb,
       "--libs-only-L": [x for x in lb if x.startswith("-L")], "--libs-only-l": [x for x in lb if x.startswith("-l")],
       "--libs-only-other": [x for x in lb if not x.startswith(("-L", "-l"))]}
out = []
for f in flags:
    if f.startswith("--variable="): out += [p[0].get(f.split("=", 1)[1], "") for p in pcs]
    elif f == "--modversion": out += [p[1].get("Version", "") for p in pcs]
    elif f in sel: out += sel[f]
if out: print(" ".join(out))
EOF
  chmod +x "$bundle/bin/pkg-config"
  # GoogleTest (headers and Debian's static libraries, 1.5 MB) in a folder of its own,
  # .peers/gpu-gtest, for bench/gpu/budgets_and_cpu_tests.sh, which runs the CPU unit tests on the
  # GPU machine's Xeon: its AVX-512 kernels have no other test machine (the 2-core machine may have
  # AVX2 only). Not in this folder: with it the tree and the carry pass the device tool's 64 MiB.
  rm -rf "$root/.peers/gpu-gtest"
  mkdir -p "$root/.peers/gpu-gtest/include" "$root/.peers/gpu-gtest/lib"
  cp -r /usr/include/gtest "$root/.peers/gpu-gtest/include/"
  cp "$lib"/libgtest.a "$lib"/libgtest_main.a "$root/.peers/gpu-gtest/lib/"
  # The llama.cpp source (slim tarball) and the gguf wheel (numpy, pyyaml, tqdm are in the image).
  if [ ! -f "$root/.peers/llama.cpp-slim.tar.gz" ]; then
    "$root/tools/peers/build_llama_cpp.sh" --pack "$root/.peers/llama.cpp-slim.tar.gz"
  fi
  cp "$root/.peers/llama.cpp-slim.tar.gz" "$bundle/"
  whl=$(ls "$root"/.peers/wheels/gguf-0.19.0-py3-none-any.whl 2>/dev/null || true)
  if [ -z "$whl" ]; then
    python3 -m pip download --quiet --no-deps --only-binary=:all: gguf==0.19.0 -d "$bundle/wheels"
  else
    cp "$whl" "$bundle/wheels/"
  fi
  echo "run_gpu.sh: prepared $bundle ($(du -sh "$bundle" | cut -f1)); carry it: carry=[\".peers/gpu-bench\"]"
  exit 0
fi

# ---------------------------------------------------------------------------------------------
# The run (and --dry-run, --local).
out=${OUT:-/tmp/sluice-bench-gpu}
mkdir -p "$out"
log=$out/run_gpu.log
t_start=$(date +%s)
if [ $mode != dry ]; then exec > >(tee "$log") 2>&1; fi
left() { echo $(( budget - ($(date +%s) - t_start) )); }
# A step's timeout: its cap, or what the budget leaves minus `reserve` seconds for later steps.
cap() { local c=$1 reserve=$2 l; l=$(( $(left) - reserve )); [ "$l" -lt "$c" ] && c=$l; [ "$c" -lt 1 ] && c=1; echo "$c"; }
say() { echo "run_gpu.sh [$(( $(date +%s) - t_start ))s]: $*" >&2; }
run() {  # run NAME TIMEOUT CMD...: prints and times the command; --dry-run only prints it.
  local name=$1 limit=$2; shift 2
  say "$name (timeout ${limit}s): $*"
  [ $mode = dry ] && return 0
  local t0=$(date +%s) rc=0
  timeout "$limit" "$@" || rc=$?
  say "$name: rc=$rc in $(( $(date +%s) - t0 )) s"
  return $rc
}

say "mode $mode, $(nproc) cores, $threads threads, $layers layers, budget ${budget}s, out $out"
for f in include/fmt/core.h include/nlohmann/json.hpp include/CLI/CLI.hpp include/httplib.h include/pcre2.h \
         lib/libpcre2-8.a lib/cmake/fmt/fmt-config.cmake bin/pkg-config llama.cpp-slim.tar.gz; do
  # The llama.cpp source only where llama.cpp is built here: not with --no-peer or a carried pack.
  if [ $f = llama.cpp-slim.tar.gz ] && { [ $no_peer = 1 ] || ls "$root"/.peers/llama-pack/llama-bench.xz.* > /dev/null 2>&1; }; then
    continue
  fi
  [ -e "$bundle/$f" ] || die "$bundle/$f missing: run bench/run_gpu.sh --prepare here and carry .peers/gpu-bench"
done
if [ $mode != local ]; then
  nvidia-smi -L 2>/dev/null || say "nvidia-smi: no GPU listed"
fi
# What the image has (the carried folder is used either way: its .pc files come first).
say "image: $(cmake --version 2>/dev/null | head -n1 || echo 'no cmake'); $(g++ --version 2>/dev/null | head -n1 || echo 'no g++');" \
  "pkg-config: $(command -v pkg-config || echo none); system libpcre2-8: $(pkg-config --modversion libpcre2-8 2>/dev/null || echo none);" \
  "ninja: $(command -v ninja || echo none); python3: $(python3 --version 2>&1)"

nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
cuda=0
[ $mode != local ] && [ -x "$nvcc_bin" ] && cuda=1
model=/tmp/sluice-bench-$shape-${layers}l.gguf
[ $mode = local ] && model=$out/$shape-${layers}l.gguf
sluice_build=$root/build/gpu-bench
[ $mode = local ] && sluice_build=$root/build/bench-local
export PKG_CONFIG_PATH=$bundle/lib/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export LD_LIBRARY_PATH=$bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
for f in libssl.so.3 libcrypto.so.3 libz.so.1; do
  ldconfig -p 2>/dev/null | grep -q "$f" || say "warning: $f is not in the image: linking cpp-httplib will fail"
done

# xz_filter [-d]: compress (or decompress) stdin to stdout, the xz format, with xz where the image
# has it and Python's lzma where it does not.
xz_filter() {
  if command -v xz > /dev/null; then
    if [ "${1:-}" = -d ]; then xz -d; else xz -T"$(nproc)" -6; fi
  elif [ "${1:-}" = -d ]; then
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.stdin.buffer), sys.stdout.buffer)'
  else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(sys.stdin.buffer, lzma.open(sys.stdout.buffer, "w", preset=6))'
  fi
}

# 1a. llama.cpp, CUDA (background): the long pole.
llama_pid=""
if [ $mode = local ]; then
  llama_bin=$(ls -d "$root"/.peers/llama.cpp-py*-cpu/bin 2>/dev/null | tail -n1 || true)
else
  llama_bin=$root/.peers/llama.cpp-py0.3.36-cuda/bin llama_pack=$root/.peers/llama-pack
  if [ $no_peer = 1 ]; then
    say "--no-peer: no llama.cpp"
  elif [ -x "$llama_bin/llama-bench" ] && "$llama_bin/llama-bench" --help > /dev/null 2>&1; then
    say "llama.cpp CUDA build exists: $llama_bin"
  elif [ $mode = run ] && ls "$llama_pack"/llama-bench.xz.* > /dev/null 2>&1 && mkdir -p "$llama_bin" \
       && cat "$llama_pack"/llama-bench.xz.* | xz_filter -d > "$llama_bin/llama-bench" && chmod +x "$llama_bin/llama-bench" \
       && "$llama_bin/llama-bench" --help > /dev/null 2>&1; then
    # A --pack-peer call's llama-bench, built by this script on the same kind of machine from the
    # same source: the build's 330-440 s are spent once a session instead of once a call.
    say "llama.cpp CUDA: llama-bench unpacked from the carried .peers/llama-pack (sha256 $(sha256sum "$llama_bin/llama-bench" | cut -c1-16), the packing call's log names the same)"
  else
    lb_limit=$(cap 460 90)
    # Beside sluice's build on 16 cores the llama.cpp CUDA build ran out of 325 s (session 23,
    # --budget 415): with less than ~400 s left for it there will be no peer figures.
    [ "$lb_limit" -lt 400 ] && say "warning: ${lb_limit}s for the llama.cpp build, which took more than 325 s beside sluice's (session 23): expect no llama.cpp figures; --budget 560 or more"
    say "llama.cpp CUDA build (background, timeout ${lb_limit}s, log /tmp/llama_build.log)"
    if [ $mode = run ]; then
      timeout "$lb_limit" "$root/tools/peers/build_llama_cpp.sh" --cuda --sdist "$bundle/llama.cpp-slim.tar.gz" \
        --jobs "$(nproc)" > /tmp/llama_build.log 2>&1 &
      llama_pid=$!
    fi
  fi
fi

# 1b. gguf + the synthetic file (background).
gen_pid=""
gen_model() {
  if ! python3 -c 'import gguf' 2>/dev/null; then
    python3 -m pip install -q --no-index --no-deps --target /tmp/sluice-site "$bundle"/wheels/gguf-*.whl || return 1
    export PYTHONPATH=/tmp/sluice-site${PYTHONPATH:+:$PYTHONPATH}
  fi
  python3 "$root/tools/make_synthetic.py" --shape "$shape" --mix q4_k_m --layers "$layers" \
    --router-skew "$skew" --router-locality "$locality" --threads "$(nproc)" -o "$model"
}
if [ -f "$model" ]; then
  say "model exists: $model"
else
  say "synthetic file (background): $layers layers, q4_k_m, skew $skew, locality $locality -> $model"
  if [ $mode != dry ]; then
    # sync: the file's dirty pages are written out before anything is timed (the kernel's
    # writeback of tens of GB competes with the CPU lane for cores and memory bandwidth).
    ( t0=$(date +%s); gen_model > /tmp/gen_model.log 2>&1; rc=$?; sync; echo "rc=$rc in $(( $(date +%s) - t0 )) s" >> /tmp/gen_model.log ) &
    gen_pid=$!
  fi
fi

# 1c. sluice, Release, from the carried folder's dependencies. Niced: llama.cpp's build is the
# critical path.
cmake_common=(-DCMAKE_BUILD_TYPE=Release -DSLUICE_TESTS=OFF -DCMAKE_PREFIX_PATH="$bundle"
  -DHTTPLIB_INCLUDE_DIR="$bundle/include")
command -v pkg-config >/dev/null || cmake_common+=(-DPKG_CONFIG_EXECUTABLE="$bundle/bin/pkg-config")
if [ $mode = local ]; then
  # Prove the carried folder suffices: the shim pkg-config and only the carried .pc files.
  cmake_common+=(-DPKG_CONFIG_EXECUTABLE="$bundle/bin/pkg-config")
  export PKG_CONFIG_LIBDIR=$bundle/lib/pkgconfig
fi
command -v ninja >/dev/null && cmake_common+=(-G Ninja)
# No sluice run happens without its build: it is not niced and may take 420 s. Niced beside the
# llama.cpp build it ran out of its 360 s twice and the call measured llama.cpp alone
# (2026-12-01 with --placement; 2026-12-02 in the default runs, at 99 of 113 objects).
sluice_nice=0 sluice_build_cap=420
build_sluice() {  # build_sluice DIR CUDA(0|1)
  local dir=$1 with_cuda=$2 args=("${cmake_common[@]}")
  if [ "$with_cuda" = 1 ]; then
    args+=(-DSLUICE_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_COMPILER="$nvcc_bin")
  else
    args+=(-DSLUICE_CUDA=OFF)
  fi
  [ -f "$dir/CMakeCache.txt" ] && ! grep -q "^CMAKE_GENERATOR:INTERNAL=$(command -v ninja >/dev/null && echo Ninja || echo 'Unix Makefiles')$" "$dir/CMakeCache.txt" && rm -rf "$dir"
  run "sluice configure (cuda=$with_cuda)" "$(cap 120 120)" cmake -S "$root" -B "$dir" "${args[@]}" \
    && run "sluice build (cuda=$with_cuda)" "$(cap "$sluice_build_cap" 120)" nice -n "$sluice_nice" cmake --build "$dir" \
      --target sluice_cli -j "$(nproc)"
}
# Two sluice builds side by side: CPU-only (for the CPU runs: the same configuration as the CPU
# build tested here) and, when nvcc is there, CUDA (for the --gpu run; its failure costs nothing
# else).
sluice="" sluice_gpu=""
cpu_build=$sluice_build-cpu
[ $mode = local ] && cpu_build=$sluice_build
if [ -n "$prebuilt" ]; then
  say "sluice: using $prebuilt (no build)"
  sluice=$prebuilt sluice_gpu=$prebuilt
elif [ $mode = dry ]; then
  build_sluice "$cpu_build" 0
  [ $cuda = 1 ] && build_sluice "$sluice_build" 1
  sluice=$cpu_build/sluice sluice_gpu=$sluice_build/sluice
else
  # One build: with nvcc, the CUDA build runs the CPU tests too (the CPU path is the same code;
  # --gpu picks the backend). Two builds beside the llama.cpp CUDA build made it miss its
  # deadline on the 16-core machine (2026-11-29: 389 s and still compiling).
  if [ $cuda = 1 ]; then
    if build_sluice "$sluice_build" 1 > /tmp/sluice_build_cuda.log 2>&1; then
      sluice=$sluice_build/sluice sluice_gpu=$sluice_build/sluice
    else
      say "sluice CUDA build failed: its log's tail"; tail -n 25 /tmp/sluice_build_cuda.log
    fi
    grep -E "^run_gpu.sh" /tmp/sluice_build_cuda.log
  else
    if build_sluice "$cpu_build" 0 > /tmp/sluice_build.log 2>&1; then sluice=$cpu_build/sluice; fi
    grep -E "^run_gpu.sh" /tmp/sluice_build.log
    if [ -z "$sluice" ]; then say "sluice CPU build failed: its log's tail"; tail -n 40 /tmp/sluice_build.log; fi
  fi
fi

# Wait for the background steps.
if [ -n "$gen_pid" ]; then wait "$gen_pid"; tail -n 3 /tmp/gen_model.log; fi
if [ -n "$llama_pid" ]; then
  say "waiting for the llama.cpp build"
  wait "$llama_pid"; say "llama.cpp build: rc=$?"
  tail -n 4 /tmp/llama_build.log
  if [ $pack_peer = 1 ] && [ -x "$llama_bin/llama-bench" ]; then
    # --pack-peer: llama-bench back through $OUT in parts under its 16 MiB a file, for later calls
    # to carry as .peers/llama-pack (the CUDA libraries it links are the image's own).
    xz_filter < "$llama_bin/llama-bench" | split -b 15M -d - "$out/llama-bench.xz."
    say "--pack-peer: llama-bench $(stat -c %s "$llama_bin/llama-bench") bytes, sha256 $(sha256sum "$llama_bin/llama-bench" | cut -c1-16) -> $(ls "$out"/llama-bench.xz.* | xargs -n1 basename | tr '\n' ' ')($(cat "$out"/llama-bench.xz.* | wc -c) bytes)"
  fi
fi
[ $mode = dry ] || [ -f "$model" ] || say "no model file: every run below will fail"
have_llama=0
{ [ $mode = dry ] || [ -x "$llama_bin/llama-bench" ]; } && [ $no_peer = 0 ] && have_llama=1
[ $have_llama = 1 ] || say "no llama-bench: llama.cpp runs skipped"

# 2. The runs, one at a time, most important first. The manifest names each file relative to $out.
rec=(python3 "$root/bench/record.py")
manifest=$out/manifest.json
rm -f "$manifest"
lb=("$root/tools/peers/run_llama_bench.sh" "$model" --bin "$llama_bin" -t "$threads")
llama_env=()  # e.g. (CUDA_VISIBLE_DEVICES=) for one run
llama_run() {  # llama_run NAME FILE PLACEMENT TIMEOUT ARGS...
  local name=$1 file=$2 placement=$3 limit=$4; shift 4
  [ $have_llama = 1 ] || return 0
  if run "$name" "$limit" env "${llama_env[@]}" "${lb[@]}" "$@" > "$out/$file"; then
    [ $mode = dry ] || "${rec[@]}" add "$manifest" --name "$name" --engine llama.cpp --file "$file" \
      --placement "$placement" --command "llama-bench -m MODEL -t $threads $* (tools/peers/run_llama_bench.sh)"
  else
    rm -f "$out/$file"
  fi
}
p=512 n=64
[ $mode = local ] && p=64 n=16
# The tests llama-bench also runs (pp, tg at depth 0) first; the rest (decode at depth p, the
# window cost curve, oracle runs) in a second run that the budget may cut.
sluice_main=(-t "$threads" -p "$p" -n "$n" -r 2 --ctx 0 --windows 0 --spec-windows 0 --json)
sluice_extra=(-t "$threads" -p 0 -n "$n" -r 2 --ctx "$p" --window-depth "$p" --windows 1,2,4,8,16
  --spec-windows 1,4,8 --spec-n 32 --json)
[ $mode = local ] && sluice_extra=(-t "$threads" -p 0 -n "$n" -r 1 --ctx "$p" --window-depth "$p" --windows 1,4
  --spec-windows 1,4 --spec-n 8 --json)
sluice_run() {  # sluice_run NAME FILE PLACEMENT TIMEOUT BINARY ARGS...
  local name=$1 file=$2 placement=$3 limit=$4 bin=$5; shift 5
  [ -n "$bin" ] || return 0
  # --sluice-chunk: the runs of a split model (the placement runs) prefill in that many rows.
  [ -n "$sluice_chunk" ] && [[ " $* " == *" --vram-budget "* ]] && set -- "$@" --chunk "$sluice_chunk"
  if run "$name" "$limit" "$bin" bench "$model" "$@" > "$out/$file"; then
    [ $mode = dry ] || "${rec[@]}" add "$manifest" --name "$name" --engine sluice --file "$file" \
      --placement "$placement" --command "sluice bench MODEL $*"
  else
    rm -f "$out/$file"
  fi
}

# The GPU's bandwidth for the ceilings, from a standalone probe (seconds to build), so they exist
# even when sluice is built without CUDA.
if [ $mode != local ] && [ $cuda = 1 ]; then
  cuda_home=$(dirname "$(dirname "$nvcc_bin")")
  if run "gpu probe build" 60 g++ -std=c++20 -O2 -DSLUICE_HAVE_CUDA -DSLUICE_GPU_PROBE_MAIN -DFMT_HEADER_ONLY \
       -I"$root/src" -I"$bundle/include" -I"$cuda_home/include" "$root/src/runtime/roofline_cuda.cpp" \
       -L"$cuda_home/lib64" -lcudart -o /tmp/sluice_gpu_probe \
     && run "gpu probe" 60 /tmp/sluice_gpu_probe > /tmp/gpu_probe.json; then
    cat /tmp/gpu_probe.json
    [ $mode = dry ] || "${rec[@]}" add-probe "$manifest" --file /tmp/gpu_probe.json
  fi
fi
if [ $placement_runs = 1 ]; then
  # Issue 10: both engines with the whole model in VRAM, then each sluice budget against the
  # llama.cpp -ncmoe that keeps about as many expert bytes in VRAM. Ceilings: three-lane (routed
  # experts from RAM and PCIe together, the rest from HBM: what nothing cached allows).
  # Reserves: ~10 s for each llama.cpp run after this one and ~30 s for each sluice run (a
  # split prefill runs most experts on the CPU lane), so that a late start cuts the whole-VRAM
  # runs short rather than losing the budget sweep. (2026-12-01: reserves of 300 s left the
  # first run 1 s.)
  # The budget runs also prefill a 4K prompt (issue 10: prefill at 512 and 4K tokens); both
  # engines in 512-row pieces (llama-bench's default ubatch, sluice bench's GPU chunk).
  p_split=$p
  [ $mode = local ] || p_split=${split_prompts:-$p,4096}
  sluice_split=(-t "$threads" -p "$p_split" -n "$n" -r "$split_reps" --ctx "$decode_depths" --windows 0 --spec-windows 0 --json)
  llama_depths=$(tr ',' '\n' <<< "$decode_depths" | grep -vx 0 | paste -sd, -)
  # --spec-accept A: the budget runs also decode by oracle-tape windows of 1 and 4 rows at that
  # acceptance (0.87 gives ~3.3 tokens a 4-row window, as an MTP head does), after 512 positions,
  # and by windows the depth policy sizes (--spec-policy 5: up to the MTP head's 4 drafts), as a
  # user's `sluice run --spec` does.
  # A list (0.87,0.6): the first in that run, each other in a run of its own (oracle runs only).
  accept_first=${spec_accept%%,*} accept_more=""
  [ "$spec_accept" != "$accept_first" ] && accept_more=${spec_accept#*,}
  [ -n "$spec_accept" ] && sluice_split=(-t "$threads" -p "$p_split" -n "$n" -r "$split_reps" --ctx "$decode_depths" --windows 0 \
    --spec-windows 1,4 --spec-policy 5 --accept "$accept_first" --spec-n "$n" --window-depth "$p" --json)
  # With less than 10 s each left beside the reserve the pair is skipped, not run to a timeout
  # (session 31: --budget 150 gave both runs 1 s, and two rc=124 lines said nothing useful).
  if [ $whole_runs = 1 ] && [ "$(cap 60 170)" -lt 10 ]; then
    say "whole-VRAM pair skipped: under 10 s would be left for it beside the budget runs' 170 s reserve ($(left) s left in all); a larger --budget runs it"
  elif [ $whole_runs = 1 ]; then
    llama_run "llama.cpp GPU -ngl 99" llama_gpu.json gpu "$(cap 60 170)" --gpu -p "$p" -n "$n" -r 2
    sluice_run "sluice GPU" sluice_gpu.json gpu "$(cap 60 160)" "$sluice_gpu" "${sluice_main[@]}" --gpu 0
    [ -f "$out/sluice_gpu.json" ] && [ -f "$out/llama_gpu.json" ] && \
      "${rec[@]}" compare "$manifest" "sluice GPU" "llama.cpp GPU -ngl 99"
  fi
  # Each budget's llama.cpp peer: -ncmoe N keeps the routed experts of layers N.. in VRAM; N is
  # the smallest whose experts fit the budget (the file's own tensor sizes: ncmoe_for_budget).
  # gen_model's gguf package: the image's, or the wheel it unpacked into /tmp/sluice-site.
  # Each budget run's cap grows with its prompts (the decode depths' prefills included): llama.cpp
  # at 300 tok/s, sluice at 1,000 (a 32K prompt at 12 GiB of a 35B: ~520 and ~1,500 tok/s
  # measured), times the repetitions.
  ptoks=0
  for pp in ${p_split//,/ } ${llama_depths//,/ }; do ptoks=$(( ptoks + pp )); done
  # llama-bench loads the file for each test: a second per GB on top (the 80B shape's 50 GB ran
  # past a 43 s cap in session 15).
  model_gb=$(( $(stat -c %s "$model" 2>/dev/null || echo 0) / 1000000000 ))
  llama_cap=$(( 30 + model_gb + ptoks * split_reps / 300 )) sluice_cap=$(( 90 + ptoks * split_reps / 1000 ))
  # --spec-accept adds the oracle runs and the depth policy's calibration (~30 forwards) to it.
  [ -n "$spec_accept" ] && sluice_cap=$(( sluice_cap + 40 ))
  # --profile-text: the routing profile the budget runs' caches start from (a stale one goes
  # first, so no run ranks by a profile this call did not make).
  [ $mode = dry ] || rm -f "$model.profile.bin"
  if [ -n "$profile_text" ] && [ -n "$sluice_gpu" ]; then
    run "sluice profile" "$(cap 150 90)" "$sluice_gpu" profile "$model" --text "$root/$profile_text" \
      --max-tokens "$profile_tokens" -t "$threads" | tail -n 3
    [ -f "$model.profile.bin" ] && say "profile: sluice profile MODEL --text $profile_text --max-tokens $profile_tokens -t $threads"
  fi
  read -r -a pairs < <(PYTHONPATH=/tmp/sluice-site${PYTHONPATH:+:$PYTHONPATH} python3 "$root/bench/ncmoe_for_budget.py" \
    "$model" ${vram_budgets//,/ } || echo)
  say "budgets and their llama.cpp -ncmoe: ${pairs[*]}"
  left=${#pairs[@]}
  for pair in "${pairs[@]}"; do
    b=${pair%%:*} nc=${pair##*:}
    llama_run "llama.cpp -ngl 99 -ncmoe $nc" "llama_ncmoe$nc.json" three-lane "$(cap $llama_cap $(( left * 40 - 10 )))" \
      --ncmoe "$nc" -p "$p_split" -n "$n" -r "$split_reps"
    sluice_run "sluice GPU --vram-budget $b" "sluice_gpu_$b.json" three-lane "$(cap $sluice_cap $(( left * 40 - 40 )))" \
      "$sluice_gpu" "${sluice_split[@]}" --gpu 0 --vram-budget "$b"
    [ -f "$out/sluice_gpu_$b.json" ] && [ -f "$out/llama_ncmoe$nc.json" ] && \
      "${rec[@]}" compare "$manifest" "sluice GPU --vram-budget $b" "llama.cpp -ngl 99 -ncmoe $nc"
    # --decode-depths: llama-bench's -d applies to its prefill tests too, so its decodes after a
    # prompt run alone (-p 0); sluice's --ctx covers them in the run above.
    if [ -n "$llama_depths" ]; then
      dtoks=0
      for d in ${llama_depths//,/ }; do dtoks=$(( dtoks + d )); done
      llama_run "llama.cpp -ngl 99 -ncmoe $nc, depths" "llama_ncmoe${nc}_d.json" three-lane \
        "$(cap $(( 30 + model_gb + dtoks * split_reps / 300 )) $(( left * 40 - 40 )))" \
        --ncmoe "$nc" -p 0 -n "$n" -r "$split_reps" -- -d "$llama_depths"
      [ -f "$out/sluice_gpu_$b.json" ] && [ -f "$out/llama_ncmoe${nc}_d.json" ] && \
        "${rec[@]}" compare "$manifest" "sluice GPU --vram-budget $b" "llama.cpp -ngl 99 -ncmoe $nc, depths"
    fi
    for a in ${accept_more//,/ }; do
      [ $(left) -gt 60 ] || break
      sluice_run "sluice GPU --vram-budget $b, accept $a" "sluice_gpu_${b}_a$a.json" three-lane "$(cap 90 $(( left * 40 - 40 )))" \
        "$sluice_gpu" -t "$threads" -p 0 -n 0 --ctx 0 --windows 0 --spec-windows 1,4 --spec-policy 5 --accept "$a" --spec-n "$n" \
        --window-depth "$p" --json --gpu 0 --vram-budget "$b"
    done
    if [ -n "$long_prompt" ]; then
      # sluice first (the faster one): llama.cpp's run, the long pole, gets what is left.
      sluice_run "sluice GPU --vram-budget $b, pp$long_prompt" "sluice_gpu_${b}_p$long_prompt.json" three-lane \
        "$(cap $(( 60 + long_prompt / 400 )) $(( left * 40 - 10 )))" "$sluice_gpu" -t "$threads" -p "$long_prompt" -n 0 -r 1 \
        --ctx 0 --windows 0 --spec-windows 0 --json --gpu 0 --vram-budget "$b"
      llama_run "llama.cpp -ngl 99 -ncmoe $nc, pp$long_prompt" "llama_ncmoe${nc}_p$long_prompt.json" three-lane \
        "$(cap $(( 30 + model_gb + long_prompt / 150 )) $(( left * 40 - 40 )))" --ncmoe "$nc" -p "$long_prompt" -n 0 -r 1
      [ -f "$out/sluice_gpu_${b}_p$long_prompt.json" ] && [ -f "$out/llama_ncmoe${nc}_p$long_prompt.json" ] && \
        "${rec[@]}" compare "$manifest" "sluice GPU --vram-budget $b, pp$long_prompt" "llama.cpp -ngl 99 -ncmoe $nc, pp$long_prompt"
    fi
    left=$(( left - 1 ))
  done
else
sluice_run "sluice CPU -t $threads" sluice_cpu.json cpu "$(cap 150 90)" "$sluice" "${sluice_main[@]}"
# CPU-only llama.cpp from the CUDA build: the GPU hidden, so nothing (not even the prompt's large
# matrix products) is offloaded.
llama_env=(CUDA_VISIBLE_DEVICES=)
llama_run "llama.cpp CPU -t $threads" llama_cpu.json cpu "$(cap 120 40)" -p "$p" -n "$n" -r 2
llama_env=()
if [ $mode != local ]; then
  llama_run "llama.cpp GPU -ngl 99" llama_gpu.json gpu "$(cap 90 20)" --gpu -p "$p" -n 128 -r 3
  llama_run "llama.cpp -ngl 99 -ncmoe $layers" llama_ncmoe.json experts-cpu "$(cap 90 30)" --ncmoe "$layers" \
    -p "$p" -n "$n" -r 2
  if [ -n "$sluice_gpu" ] && "$sluice_gpu" bench --help 2>/dev/null | grep -q -- '--gpu'; then
    sluice_run "sluice GPU" sluice_gpu.json gpu "$(cap 120 60)" "$sluice_gpu" "${sluice_main[@]}" --gpu 0
  else
    say "this sluice build has no CUDA backend (bench has no --gpu): no sluice GPU run"
  fi
fi
sluice_run "sluice CPU -t $threads, depth $p" sluice_cpu_extra.json cpu "$(cap 150 5)" "$sluice" "${sluice_extra[@]}"
[ -f "$out/sluice_cpu.json" ] && [ -f "$out/llama_cpu.json" ] && \
  "${rec[@]}" compare "$manifest" "sluice CPU -t $threads" "llama.cpp CPU -t $threads"
[ -f "$out/sluice_gpu.json" ] && [ -f "$out/llama_gpu.json" ] && \
  "${rec[@]}" compare "$manifest" "sluice GPU" "llama.cpp GPU -ngl 99"
fi

# 3. The ratio table, last.
total=$(( $(date +%s) - t_start ))
machine_note="bench/run_gpu.sh took $total s on $(nproc) cores (builds and the model file included)"
tag=$shape
[ "$shape" = qwen3-30b-a3b ] && tag=q30   # the scenario name earlier sessions recorded
title="GPU machine: sluice vs llama.cpp" scenario="gpu/$tag-${layers}l-q4_k_m"
[ $placement_runs = 1 ] && title="GPU machine: routed experts under a VRAM budget, sluice vs llama.cpp -ncmoe" \
  scenario="gpu-placement/$tag-${layers}l-q4_k_m"
args=(report "$manifest" --model "synthetic $shape shape, $layers layers, q4_k_m, router skew $skew locality $locality"
  --scenario "$scenario" --title "$title" --note "$machine_note")
[ $record = 1 ] && args+=(--record)
if [ $mode = dry ]; then
  say "then: bench/record.py ${args[*]}"
elif [ -f "$manifest" ]; then
  "${rec[@]}" "${args[@]}"
  echo "record here: python3 bench/record.py report <files_at>/manifest.json --model ... --scenario ... --record"
  # The lent machine returns 8 files: the runs' JSONs travel as one archive (extract it beside
  # manifest.json before recording).
  if [ $placement_runs = 1 ] && [ $mode != dry ]; then
    (cd "$out" && ls *.json | grep -v '^manifest.json$' | tar czf results.tar.gz -T - && ls *.json | grep -v '^manifest.json$' | xargs rm -f)
  fi
else
  say "no run produced results"
fi
say "done in $total s"
