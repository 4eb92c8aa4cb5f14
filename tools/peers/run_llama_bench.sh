#!/usr/bin/env bash
# tools/peers/run_llama_bench.sh: run llama-bench on a GGUF under the same conditions as a sluice
# benchmark (threads, and on the GPU the same VRAM use) and print its JSON (llama-bench -o json)
# on stdout; everything else goes to stderr.
#
#   tools/peers/run_llama_bench.sh MODEL [options] [-- extra llama-bench args]
#     -t, --threads N      CPU threads (default: nproc)
#     -p N[,N...]          prompt tokens for the prefill tests (default 512; 0 = none)
#     -n N                 generated tokens for the decode test (default 128; 0 = none)
#     -r N                 repetitions (default 3)
#     --gpu                offload all layers (-ngl 99); routed experts stay where --ncmoe says
#     --ncmoe N            keep the routed experts of the first N layers on the CPU (implies --gpu)
#     --vram-budget GiB    pick --ncmoe as the smallest N whose GPU share (all tensors minus the
#                          routed experts of the first N layers) fits in GiB, minus --vram-reserve
#     --vram-reserve GiB   room left for KV cache and compute buffers (default 2)
#     --bin DIR            folder with llama-bench (default: .peers/llama.cpp-py*-{cpu,cuda}/bin)
#   Example (GPU, 20 GiB for weights and buffers):
#     tools/peers/run_llama_bench.sh /tmp/q30.gguf --vram-budget 20 -t 16 > bench/llama_q30.json
set -euo pipefail

root=$(cd "$(dirname "$0")/../.." && pwd)
die() { echo "run_llama_bench.sh: $*" >&2; exit 1; }
[ $# -ge 1 ] || { sed -n '2,20p' "$0" >&2; exit 2; }
case "$1" in -h|--help) sed -n '2,20p' "$0"; exit 0 ;; esac
model=$1; shift
[ -f "$model" ] || die "model not found: $model"
threads=$(nproc) prompt=512 gen=128 reps=3 gpu=0 ncmoe="" budget="" reserve=2 bin="" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -t|--threads) threads=$2; shift ;;
    -p) prompt=$2; shift ;;
    -n) gen=$2; shift ;;
    -r) reps=$2; shift ;;
    --gpu) gpu=1 ;;
    --ncmoe) ncmoe=$2; gpu=1; shift ;;
    --vram-budget) budget=$2; gpu=1; shift ;;
    --vram-reserve) reserve=$2; shift ;;
    --bin) bin=$2; shift ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
[[ $prompt =~ ^[0-9]+(,[0-9]+)*$ ]] || die "prompt: expected numbers separated by commas, got '$prompt'"
for v in threads gen reps reserve; do
  [[ ${!v} =~ ^[0-9]+([.][0-9]+)?$ ]] || die "$v: expected a number, got '${!v}'"
done

if [ -z "$bin" ]; then
  flavour=cpu; [ $gpu = 1 ] && flavour=cuda
  bin=$(ls -d "$root"/.peers/llama.cpp-py*-$flavour/bin 2>/dev/null | tail -n1 || true)
  [ -n "$bin" ] || die "no $flavour llama-bench under .peers/: run tools/peers/build_llama_cpp.sh$([ $gpu = 1 ] && echo ' --cuda')"
fi
[ -x "$bin/llama-bench" ] || die "not executable: $bin/llama-bench"

if [ -n "$budget" ] && [ -z "$ncmoe" ]; then
  # The routed experts are what -ncmoe moves to the CPU; everything else stays on the GPU.
  ncmoe=$(python3 - "$model" "$budget" "$reserve" <<'EOF'
import re, sys
import gguf
path, budget, reserve = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
r = gguf.GGUFReader(path)
total, per_layer = 0, {}
for t in r.tensors:
    total += int(t.n_bytes)
    m = re.match(r"blk\.(\d+)\.ffn_(gate|up|down)_exps\.weight$", t.name)
    if m:
        per_layer[int(m.group(1))] = per_layer.get(int(m.group(1)), 0) + int(t.n_bytes)
room = (budget - reserve) * 2**30
gpu_bytes, n = total, 0
while gpu_bytes > room and n < len(per_layer):
    gpu_bytes -= per_layer.get(n, 0)
    n += 1
if gpu_bytes > room:
    sys.exit(f"--vram-budget {budget} GiB: the non-expert tensors alone need "
             f"{gpu_bytes / 2**30:.2f} GiB + {reserve} GiB reserve")
print(f"run_llama_bench.sh: --vram-budget {budget} GiB -> -ncmoe {n} "
      f"({gpu_bytes / 2**30:.2f} GiB of weights on the GPU)", file=sys.stderr)
print(n)
EOF
)
fi

args=(-m "$model" -t "$threads" -p "$prompt" -n "$gen" -r "$reps" -o json)
if [ $gpu = 1 ]; then
  args+=(-ngl 99)
  [ -n "$ncmoe" ] && args+=(-ncmoe "$ncmoe")
else
  args+=(-ngl 0)
fi
echo "run_llama_bench.sh: $bin/llama-bench ${args[*]} ${extra[*]}" >&2
exec "$bin/llama-bench" "${args[@]}" "${extra[@]}"
