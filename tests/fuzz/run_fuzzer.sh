#!/usr/bin/env bash
# run_fuzzer.sh BINARY CORPUS WORKDIR SECONDS: fuzz for a bounded time, starting from the
# committed corpus, writing new inputs only to WORKDIR. A crash fails the test and leaves the
# reproducer in WORKDIR.
set -euo pipefail
bin=$1 corpus=$2 work=$3 seconds=$4
rm -rf "$work"; mkdir -p "$work/new"
"$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -artifact_prefix="$work/" \
  -print_final_stats=1 "$work/new" "$corpus"
