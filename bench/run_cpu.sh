#!/usr/bin/env bash
# bench/run_cpu.sh: sluice and llama.cpp on the same synthetic Qwen3-30B-A3B-shaped file, on this
# machine's CPU, with the same threads; the ratio table is printed last.
#
#   bench/run_cpu.sh [options]
#     --layers N          layers of the synthetic file (default 12: ~5 GB in Q4_K_M, fits a 2-core
#                         24 GB machine; 48 is the real model, 18.6 GB)
#     --mix MIX           quant mix of tools/make_synthetic.py (default q4_k_m)
#     --router-skew X     router skew (default 0: even routing; 1.3 with locality 0.3 is the
#     --router-locality X   GPT-OSS-20B-calibrated case, see tools/README.md)
#     -t, --threads N     threads for both engines (default: nproc)
#     -p N, -n N, -r N    prefill tokens, decode tokens, repetitions (default 512, 64, 2)
#     --model PATH        use this GGUF instead of making one (then --layers/--mix only label it,
#                         unless --desc and --scenario name it)
#     --desc TEXT         the model's description in the report (default: the synthetic file's)
#     --scenario NAME     the report's scenario (default cpu/q30-<layers>l-<mix>)
#     --out DIR           logs and JSON (default /tmp/sluice-bench-cpu)
#     --build-dir DIR     sluice build folder (default build/cpu: Release, CPU only)
#     --windows L, --spec-windows L, --spec-n N   sluice's cost curve and oracle runs (default
#                         1,2,4,8,16; 1,4,8; 32)
#     --sluice-args "..." extra `sluice bench` arguments (e.g. "--accept 0.9")
#     --keep-model        keep the synthetic file (default: deleted at the end if this script made it)
#     --record            append the results to bench/RESULTS.md and bench/results.jsonl
#     --dry-run           print every step's command, run nothing
# What runs: llama-bench -p P -n N -r R -t T (pp and tg at depth 0) and
# sluice bench -p P -n N --ctx 0,P -r R -t T (the same tests, plus decode after P tokens, the
# window cost curve and oracle runs at depth P). The llama.cpp build in .peers/ is reused when it
# exists (tools/peers/build_llama_cpp.sh makes it otherwise).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
layers=12 mix=q4_k_m skew=0 locality=0 threads=$(nproc) prompt=512 gen=64 reps=2 model="" out=/tmp/sluice-bench-cpu
build_dir=$root/build/cpu sluice_args="" desc="" scenario="" keep=0 record=0 dry=0 windows=1,2,4,8,16 spec_windows=1,4,8 spec_n=32
die() { echo "run_cpu.sh: $*" >&2; exit 1; }
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) layers=$2; shift ;;
    --mix) mix=$2; shift ;;
    --router-skew) skew=$2; shift ;;
    --router-locality) locality=$2; shift ;;
    -t|--threads) threads=$2; shift ;;
    -p) prompt=$2; shift ;;
    -n) gen=$2; shift ;;
    -r) reps=$2; shift ;;
    --model) model=$2; shift ;;
    --desc) desc=$2; shift ;;
    --scenario) scenario=$2; shift ;;
    --out) out=$2; shift ;;
    --build-dir) build_dir=$2; shift ;;
    --sluice-args) sluice_args=$2; shift ;;
    --windows) windows=$2; shift ;;
    --spec-windows) spec_windows=$2; shift ;;
    --spec-n) spec_n=$2; shift ;;
    --keep-model) keep=1 ;;
    --record) record=1 ;;
    --dry-run) dry=1 ;;
    -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
  esac
  shift
done
for v in layers threads prompt gen reps; do
  [[ ${!v} =~ ^[0-9]+$ ]] || die "$v: expected a whole number, got '${!v}'"
done
[ "$prompt" -gt 0 ] && [ "$gen" -gt 0 ] || die "-p and -n must be > 0 (the ratio table compares both)"

# Every step goes through step(): printed, then run unless --dry-run.
step() {
  echo "+ $*" >&2
  [ $dry = 1 ] || "$@"
}
t_start=$(date +%s)
mkdir -p "$out"
log=$out/run_cpu.log
[ $dry = 1 ] || exec > >(tee "$log") 2>&1
echo "run_cpu.sh: $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $threads threads, out $out"

# 1. sluice, Release, CPU only.
step cmake -S "$root" -B "$build_dir" -DCMAKE_BUILD_TYPE=Release -DSLUICE_CUDA=OFF >/dev/null
step cmake --build "$build_dir" --target sluice_cli -j "$(nproc)"
sluice=$build_dir/sluice

# 2. llama.cpp (CPU): reuse the peer build when there is one.
bin=$(ls -d "$root"/.peers/llama.cpp-py*-cpu/bin 2>/dev/null | tail -n1 || true)
if [ -z "$bin" ] || [ ! -x "$bin/llama-bench" ]; then
  step "$root/tools/peers/build_llama_cpp.sh"
  bin=$(ls -d "$root"/.peers/llama.cpp-py*-cpu/bin 2>/dev/null | tail -n1 || true)
fi
[ $dry = 1 ] || [ -x "$bin/llama-bench" ] || die "no llama-bench after the build (expected under .peers/)"

# 3. The synthetic Qwen3-30B-A3B-shaped file.
made_model=0
if [ -z "$model" ]; then
  model=$out/q30-${mix}-${layers}l-skew${skew}-loc${locality}.gguf
  if [ ! -f "$model" ]; then
    step python3 "$root/tools/make_synthetic.py" --shape qwen3-30b-a3b --mix "$mix" --layers "$layers" \
      --router-skew "$skew" --router-locality "$locality" -o "$model"
    made_model=1
  fi
fi
[ $dry = 1 ] || [ -f "$model" ] || die "model not found: $model"
model_desc=${desc:-"synthetic Qwen3-30B-A3B shape, $layers layers, $mix, router skew $skew locality $locality"}
[ $dry = 1 ] || model_desc="$model_desc ($(du -BM "$model" | cut -f1 | tr -d M) MiB)"

# 4. Both engines, one after the other (never at once: they share the cores).
sluice_cmd=("$sluice" bench "$model" -t "$threads" -p "$prompt" -n "$gen" -r "$reps" --ctx "0,$prompt"
  --window-depth "$prompt" --windows "$windows" --spec-windows "$spec_windows" --spec-n "$spec_n" --json)
# shellcheck disable=SC2206
[ -n "$sluice_args" ] && sluice_cmd+=($sluice_args)
llama_cmd=("$root/tools/peers/run_llama_bench.sh" "$model" -t "$threads" -p "$prompt" -n "$gen" -r "$reps"
  --bin "$bin")
t0=$(date +%s)
step "${sluice_cmd[@]}" > "$out/sluice_cpu.json"
t1=$(date +%s)
step "${llama_cmd[@]}" > "$out/llama_cpu.json"
t2=$(date +%s)
echo "run_cpu.sh: sluice bench took $((t1 - t0)) s, llama-bench $((t2 - t1)) s"
if [ $made_model = 1 ] && [ $keep = 0 ]; then step rm -f "$model"; fi

# 5. The ratio table (last), recorded with --record.
rec=(python3 "$root/bench/record.py")
m=$out/run_cpu.manifest.json
step rm -f "$m"
step "${rec[@]}" add "$m" --name "sluice -t $threads" --engine sluice --file sluice_cpu.json --placement cpu \
  --command "sluice bench MODEL ${sluice_cmd[*]:3}"
step "${rec[@]}" add "$m" --name "llama.cpp -t $threads" --engine llama.cpp --file llama_cpu.json \
  --placement cpu --command "llama-bench -m MODEL -t $threads -p $prompt -n $gen -r $reps -ngl 0 -o json"
step "${rec[@]}" compare "$m" "sluice -t $threads" "llama.cpp -t $threads"
total=$(( $(date +%s) - t_start ))
args=(report "$m" --model "$model_desc" --scenario "${scenario:-cpu/q30-${layers}l-$mix}" --title "CPU: sluice vs llama.cpp"
  --note "bench/run_cpu.sh took $total s (sluice bench $((t1 - t0)) s, llama-bench $((t2 - t1)) s; builds and the model file included in the total)")
[ $record = 1 ] && args+=(--record)
step "${rec[@]}" "${args[@]}"
