#!/usr/bin/env bash
# bench/gpu/ab.sh: one device call that measures a change of ours against a base tree, the way
# session 23 did each of its calls: the working tree and the base built side by side, the parity
# tests on the working tree, then the same decode runs on both builds, then the working tree's
# decode step traced kernel by kernel (bench/gpu/step_trace).
#
#   bash bench/gpu/ab.sh --prepare [BASE]   (here) export BASE (a commit, default HEAD) into
#                                           .peers/old-tree (src include bench tests/gpu)
#   run(kind="nvidia-h200", timeout_s=560,
#       carry=[".peers/gpu-bench/include", ".gpudeps/py", ".peers/old-tree"],
#       command="OUT=$OUT bash bench/gpu/ab.sh")
#
# The script must be in the tree that travels (tracked, or untracked and not ignored).
# ~250 s on a fresh H200: the builds (~110 s, three at once on 16 cores) while the synthetic
# 48-layer Qwen3-30B-A3B file and an 8-layer Qwen3.6-35B-A3B file are written; the parity tests
# (~25 s); decode_bench FILE 512 128 on each file and split_decode_bench FILE 8 512 128 1 on the
# 30B file, base then working tree; step_trace on both files. $OUT gets summary.txt, ab.log,
# parity_logs.txt (matmul, ops + delta_net, model + mtp, placement), trace_30b.log,
# trace_35b.log, builds.log: 6 files (the machine returns 8 at most).
# AB_TRACE=0 skips the trace build and runs; AB_SPLIT=0 the split runs; AB_35B=0 the 35B file.
# AB_DEPTH=N adds decode_bench FILE N 64 and split_decode_bench FILE 8 N 64 1 on the 30B file for
# both builds (decode at depth N, the whole model and an 8 GiB budget);
# AB_KBENCH=1 adds both builds' kernel_bench attention and router lines (kernel_bench 200);
# AB_KNCU=1 Nsight Compute's occupancy and warp states of the split attention kernel at 4,096
# positions in kernel_bench, both builds (kncu.txt).
# AB_WINDOW_ROWS=N also traces verify windows of N rows on the trace builds (see below).
# AB_TRACE_BASE=1 also builds the base with STEP_TRACE=1 and traces it (trace_30b_base.log in place
# of trace_35b.log): per-kernel times of both trees from one machine (traces from two calls
# differ by more than a small change: session 27).
# AB_NCU=1 adds bench/gpu/ncu_source.sh on the working tree's build and the 30B file: ncu.tar.gz
# and ncu_top.txt (the SASS lines with the most warp-state samples), 8 files in all.
set -uo pipefail
cd "$(dirname "$0")/../.."

if [ "${1:-}" = --prepare ]; then
  base=${2:-HEAD}
  rm -rf .peers/old-tree && mkdir -p .peers/old-tree
  git archive "$base" src include bench tests/gpu CMakeLists.txt | tar -x -C .peers/old-tree
  echo "ab.sh: $(git rev-parse --short "$base") exported to .peers/old-tree ($(du -sh .peers/old-tree | cut -f1)); carry it"
  # The other two carried folders, where a fresh checkout lacks them: the gguf package (with the
  # yaml and tqdm it imports; the machine's Python has numpy) for tools/make_synthetic.py, and
  # the headers and libraries of bench/run_gpu.sh --prepare.
  if [ ! -d .gpudeps/py/gguf ]; then
    mkdir -p .gpudeps/py
    python3 -c "import gguf, yaml, tqdm, os; print(*(os.path.dirname(m.__file__) for m in (gguf, yaml, tqdm)), sep=chr(10))" |
      xargs -I{} cp -r {} .gpudeps/py/ && find .gpudeps/py -name __pycache__ -prune -exec rm -rf {} +
    echo "ab.sh: .gpudeps/py ($(du -sh .gpudeps/py | cut -f1)); carry it"
  fi
  [ -d .peers/gpu-bench/include ] || bash bench/run_gpu.sh --prepare
  exit 0
fi

O=${OUT:?OUT: the folder whose files come back}
mkdir -p "$O"
# Three builds and an 18 GB file: only where a GPU is.
nvidia-smi -L > /dev/null 2>&1 || { echo "ab.sh: no GPU here (the device machine runs it)" | tee "$O/summary.txt"; exit 2; }
[ -d .peers/old-tree/src ] || { echo "ab.sh: no .peers/old-tree (bash bench/gpu/ab.sh --prepare BASE, then carry it)" | tee "$O/summary.txt"; exit 2; }
f30=/tmp/qwen3-30b-a3b-sluice.gguf
f35=/tmp/q36-8-sluice.gguf
B=build/gpu-direct
# The base tree builds with the same carried headers as the working tree.
mkdir -p .peers/old-tree/.peers/gpu-bench && cp -r .peers/gpu-bench/include .peers/old-tree/.peers/gpu-bench/

# AB_LIGHT=1: the two builds, the parity tests on the working tree (the synthetic hybrids and
# models/*.gguf left out) and both builds' kernel_bench, nothing else (no synthetic file, no
# decode runs): ~2 minutes where device time is short. $OUT gets light.log and parity_logs.txt.
# AB_LIGHT_DECODE=1 adds the 30B file (written while the builds run) and decode_bench FILE 512 64
# and FILE 4096 64 on both builds: ~1.5 minutes more.
# AB_CPU_DOT=1 adds bench/cpu_kernels/bench_dot on the host CPU (one thread, Q4_1, Q8_0 and Q4_K,
# linked against the working tree's build): the cost of a window's extra rows in the column
# tiles on the 16-core Xeon, where a verify window's second row costs far more than on this VM.
if [ "${AB_LIGHT:-0}" = 1 ]; then
  if [ "${AB_LIGHT_DECODE:-0}" = 1 ] && [ ! -s "$f30" ]; then
    (PYTHONPATH=.gpudeps/py timeout 200 python3 tools/make_synthetic.py --shape qwen3-30b-a3b --mix q4_k_m --layers 48 \
       -o "$f30" > /tmp/ab-synth30.log 2>&1) &
  fi
  (cd .peers/old-tree && JOBS=8 CUDA_ARCH=90 bash bench/gpu/build.sh /tmp/ab-base > /tmp/ab-base.log 2>&1) &
  JOBS=8 CUDA_ARCH=90 bash bench/gpu/build.sh $B > /tmp/ab-tree.log 2>&1
  wait   # the base build and the 30B file: nothing below runs beside them (kernel_bench is timed)
  {
    echo "machine: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(nproc) cores"
    tail -n 2 /tmp/ab-base.log /tmp/ab-tree.log
    for t in act_quant_parity ops_parity delta_net_parity matmul_parity placement_parity mtp_parity; do
      echo "#### $t (working tree)"; timeout 150 $B/$t > "/tmp/$t.log" 2>&1; echo "rc=$?"
      grep -c "^PASS" "/tmp/$t.log"; grep -E "^FAIL" "/tmp/$t.log" | head -5; tail -n 1 "/tmp/$t.log"
    done
    echo "#### model_parity (working tree)"; timeout 150 $B/model_parity tests/golden/fixtures 2>&1 | tail -n 2
    for b in /tmp/ab-base $B; do
      echo "#### $b kernel_bench"; timeout 90 $b/kernel_bench 200 2>&1 | grep -E "attention|^router|FAIL"
    done
    if [ "${AB_CPU_DOT:-0}" = 1 ]; then
      echo "#### bench_dot (host CPU, 1 thread)"; lscpu | grep -E "Model name|^CPU\(s\)|Thread"
      grep -o -w -E "amx_int8|avx512_vnni" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
      g++ -std=c++20 -O2 -ffp-contract=off -DFMT_HEADER_ONLY -Isrc -Iinclude -I.peers/gpu-bench/include \
        bench/cpu_kernels/bench_dot.cpp $B/libsluice_gpu.a -o /tmp/bench_dot -lpthread -L/usr/local/cuda/lib64 -lcudart &&
        timeout 120 /tmp/bench_dot 3 Q4_1 Q8_0 Q4_K
    fi
    if [ "${AB_LIGHT_DECODE:-0}" = 1 ]; then
      for d in 512 4096; do
        for b in /tmp/ab-base $B; do
          echo "#### $b decode_bench 30B 48L at depth $d"
          timeout 90 $b/decode_bench $f30 $d 64 2>&1 | grep -E "prefill|decode \(graphs \+|identical|FAIL"
        done
      done
    fi
  } > "$O/light.log" 2>&1
  cat /tmp/ops_parity.log /tmp/matmul_parity.log > "$O/parity_logs.txt" 2>/dev/null
  exit 0
fi

# The base and the trace builds beside session.sh's own build (its parity tests, the 30B file).
(cd .peers/old-tree && JOBS=5 CUDA_ARCH=90 bash bench/gpu/build.sh /tmp/ab-base > /tmp/ab-base.log 2>&1
 echo "base build rc=$?" >> /tmp/ab-base.log) &
if [ "${AB_TRACE:-1}" = 1 ]; then
  (JOBS=5 CUDA_ARCH=90 STEP_TRACE=1 bash bench/gpu/build.sh /tmp/ab-trace > /tmp/ab-trace.log 2>&1
   echo "trace build rc=$?" >> /tmp/ab-trace.log) &
fi
if [ "${AB_TRACE_BASE:-0}" = 1 ]; then
  (cd .peers/old-tree && JOBS=4 CUDA_ARCH=90 STEP_TRACE=1 bash bench/gpu/build.sh /tmp/ab-base-trace > /tmp/ab-base-trace.log 2>&1
   echo "base trace build rc=$?" >> /tmp/ab-base-trace.log) &
fi
if [ "${AB_35B:-1}" = 1 ]; then
  (PYTHONPATH=.gpudeps/py timeout 200 python3 tools/make_synthetic.py --shape qwen3.6-35b-a3b --mix q4_k_m --layers 8 \
     -o "$f35" > /tmp/ab-synth35.log 2>&1; echo "make_synthetic 35B rc=$?" >> /tmp/ab-synth35.log) &
fi
# session.sh scales its programs' caps by its budget below 420 s (run.sh's rs): with 300, a build
# of 187 s (four at once with AB_TRACE_BASE=1, session 48) left ops_parity a cap of 1 s. The call's
# own timeout bounds the whole; the parity programs take ~25 s.
OUT=/tmp/ab-session BUDGET_S=420 T_TEST=200 NCU=0 KERNEL_BENCH=0 PLACEMENT_SYNTH=0 DECODE_BENCH=0 SYNTH_LAYERS=48 \
  N_PROMPT=512 SYNTH_FILE=$f30 bash bench/gpu/session.sh > /tmp/ab-session.out 2>&1
wait
{ tail -n 3 /tmp/ab-base.log /tmp/ab-trace.log /tmp/ab-base-trace.log /tmp/ab-synth35.log 2>/dev/null; cat /tmp/ab-session.out; } > "$O/builds.log"

{
  for b in /tmp/ab-base $B; do
    echo "#### $b decode_bench 30B 48L"; timeout 60 $b/decode_bench $f30 512 128 2>&1 | grep -E "prefill|decode|identical|window|FAIL"
  done
  if [ -s "$f35" ]; then
    for b in /tmp/ab-base $B; do
      echo "#### $b decode_bench 35B 8L"; timeout 40 $b/decode_bench $f35 512 128 2>&1 | grep -E "decode|identical|window|FAIL"
    done
  fi
  if [ -n "${AB_DEPTH:-}" ]; then
    for b in /tmp/ab-base $B; do
      echo "#### $b decode_bench 30B 48L at depth $AB_DEPTH"
      timeout 120 $b/decode_bench $f30 "$AB_DEPTH" 64 2>&1 | grep -E "prefill|decode|identical|FAIL"
    done
    for b in /tmp/ab-base $B; do
      echo "#### $b split_decode_bench 30B 8 GiB at depth $AB_DEPTH"
      timeout 120 $b/split_decode_bench $f30 8 "$AB_DEPTH" 64 1 2>&1 | grep -E "^cost|^cpu-only|identical|FAIL"
    done
  fi
  if [ "${AB_KBENCH:-0}" = 1 ]; then
    for b in /tmp/ab-base $B; do
      echo "#### $b kernel_bench attention and router"; timeout 90 $b/kernel_bench 200 2>&1 | grep -E "^attention|^router|FAIL"
    done
  fi
  # AB_KNCU=1: Nsight Compute's launch, occupancy and warp-state sections for the split attention
  # kernel at 4,096 positions (kernel_bench 3: 3 warm-up launches and 3 timed at 512 positions come
  # first, so launch 7 is the first at 4,096), both builds; the details pages go to kncu.txt.
  if [ "${AB_KNCU:-0}" = 1 ]; then
    ncu=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
    for b in /tmp/ab-base $B; do
      echo "#### $b ncu attention_split_kernel at 4,096 positions" >> "$O/kncu.txt"
      timeout 120 "$ncu" -k regex:attention_split_kernel --launch-skip 6 --launch-count 1 --section LaunchStats \
        --section Occupancy --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis \
        $b/kernel_bench 3 >> "$O/kncu.txt" 2>&1
      grep -E "Duration|Achieved Occupancy|Theoretical Occupancy|Block Limit Shared|Shared Memory Configuration|Waves Per SM" \
        "$O/kncu.txt" | tail -n 7
    done
  fi
  if [ "${AB_SPLIT:-1}" = 1 ]; then
    for b in /tmp/ab-base $B; do
      echo "#### $b split_decode_bench 30B 8 GiB"
      timeout 60 $b/split_decode_bench $f30 8 512 128 1 2>&1 | grep -E "^cost|^cpu-only|identical|FAIL"
    done
  fi
} > "$O/ab.log" 2>&1
if [ "${AB_TRACE:-1}" = 1 ]; then
  timeout 60 /tmp/ab-trace/step_trace $f30 512 32 > "$O/trace_30b.log" 2>&1
  if [ "${AB_TRACE_BASE:-0}" = 1 ]; then
    timeout 60 /tmp/ab-base-trace/step_trace $f30 512 32 > "$O/trace_30b_base.log" 2>&1
  elif [ -s "$f35" ]; then
    timeout 60 /tmp/ab-trace/step_trace $f35 512 32 > "$O/trace_35b.log" 2>&1
  fi
fi
# AB_WINDOW_ROWS=N: each trace build also traces verify windows of N rows (step_trace FILE 512 16 60 N):
# trace_w<N>_30b.log, and with AB_TRACE_BASE=1 trace_w<N>_30b_base.log (8 files then, the most that
# come back). decode_bench's window is 8 rows; the spec runs' windows are 4 (session 48's router).
if [ "${AB_TRACE:-1}" = 1 ] && [ -n "${AB_WINDOW_ROWS:-}" ]; then
  timeout 60 /tmp/ab-trace/step_trace $f30 512 16 60 "$AB_WINDOW_ROWS" > "$O/trace_w${AB_WINDOW_ROWS}_30b.log" 2>&1
  if [ "${AB_TRACE_BASE:-0}" = 1 ]; then
    timeout 60 /tmp/ab-base-trace/step_trace $f30 512 16 60 "$AB_WINDOW_ROWS" > "$O/trace_w${AB_WINDOW_ROWS}_30b_base.log" 2>&1
  fi
fi
if [ "${AB_NCU:-0}" = 1 ]; then
  OUT=/tmp/ab-ncu NCU_FILE=$f30 NCU_BUILD=0 timeout 260 bash bench/gpu/ncu_source.sh > /dev/null 2>&1
  cp /tmp/ab-ncu/source_top.txt "$O/ncu_top.txt" 2>/dev/null
  tar czf "$O/ncu.tar.gz" -C /tmp/ab-ncu . 2>/dev/null
fi
s=/tmp/ab-session
cp $s/summary.txt "$O/summary.txt" 2>/dev/null
cat $s/matmul_parity.h200.log $s/ops_parity.h200.log $s/model_parity.h200.log $s/placement_parity.h200.log \
  > "$O/parity_logs.txt" 2>/dev/null
grep -E "^(#### |prefill|decode \(graphs \+ programmatic|verify window|cost |cpu-only |attention|router|  *(Duration|Achieved Occ|Theoretical Occ|Block Limit Sh|Shared Memory Conf|Waves))" "$O/ab.log" | tee -a "$O/summary.txt"
# WINDOW_BENCH=1 (passed on to session.sh): the window kernels' table of the working tree.
if [ -s $s/window_bench.h200.log ]; then cp $s/window_bench.h200.log "$O/window_bench.log"; fi
