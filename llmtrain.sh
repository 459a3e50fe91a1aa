#!/usr/bin/env bash
# llmtrain.sh: set up a fresh Debian 12 machine (as root), build, and run.
#
#   ./llmtrain.sh demo    install what is missing, build, run the main job
#   ./llmtrain.sh test    install what is missing, build, run the test suite
#   ./llmtrain.sh setup   install and build only
#   ./llmtrain.sh bench   install, build, run the benchmarks (bench/run.sh)
#
# CUDA and NCCL are used when /usr/local/cuda (or nvcc on PATH) is present
# and skipped cleanly when not. Environment: BUILD_DIR (default build),
# MESON_ARGS (extra `meson setup` arguments), LLMT_NO_APT=1 (never run apt).
set -euo pipefail
cd "$(dirname "$0")"
top=$PWD
build=${BUILD_DIR:-build}

# What the library and the main job need, and what only the tests need.
pkgs_build=(gcc g++ make pkg-config meson ninja-build binutils
            libcjson-dev libxxhash-dev libaio-dev libopenblas-dev
            libopenmpi-dev openmpi-bin libgloo-dev python3 fortunes fortunes-min)
# pkg:command entries are skipped when the command is already on PATH (a
# toolchain installed another way, e.g. rustup's cargo).
pkgs_test=(abigail-tools clang-format chromium golang-go:go cargo:cargo python3-numpy python3-torch nodejs:node)

say() { printf '\033[1mllmtrain.sh:\033[0m %s\n' "$*" >&2; }

install_packages() {
  local missing=()
  for entry in "$@"; do
    local p=${entry%%:*} c=${entry#*:}
    [ "$c" != "$entry" ] && command -v "$c" >/dev/null 2>&1 && continue
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "${LLMT_NO_APT:-0}" = 1 ] || ! command -v apt-get >/dev/null; then
    say "missing packages (not installing): ${missing[*]}"; return 0
  fi
  if [ "$(id -u)" != 0 ]; then
    say "missing packages: ${missing[*]} — run as root or install them"; return 1
  fi
  say "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

cuda_path() {
  for d in /usr/local/cuda/bin; do
    [ -x "$d/nvcc" ] && { export PATH="$d:$PATH"; return; }
  done
}

configure_and_build() {
  cuda_path
  if [ ! -f "$build/build.ninja" ]; then
    say "configuring $build"
    meson setup "$build" ${MESON_ARGS:-}
  fi
  say "building"
  ninja -C "$build"
}

# demo trains into runs/demo and reports on it (removed first unless
# --resume): another --out would reach train twice, so it is refused here,
# before anything is installed or built.
demo_args() {
  local a
  for a in "$@"; do
    case "$a" in
      --out|--out=*) say "demo: --out is not taken (the demo's run is runs/demo); for another directory run: $build/tools/llmtrain train examples/specs/demo-cpu.json --out DIR, then llmtrain report DIR"
                     exit 2 ;;
    esac
  done
}

demo() {
  local cli="$build/tools/llmtrain"
  "$cli" version
  "$cli" features
  if "$cli" help train >/dev/null 2>&1; then
    # a fresh run each time, unless asked to continue the last one
    case " $* " in *" --resume "*) ;; *) rm -rf runs/demo ;; esac
    say "training a small GPT on the CPU (a few minutes); output in runs/demo"
    "$cli" train examples/specs/demo-cpu.json --out runs/demo "$@"
    # the run's page: loss, MFU, tokens/s, where the time went
    if "$cli" report runs/demo >/dev/null; then
      say "report: open $(pwd)/runs/demo/report.html in a browser"
    fi
  elif "$cli" help plan >/dev/null 2>&1; then
    "$cli" plan examples/specs/llama3-405b-16k.json
  fi
}

cmd=${1:-}
shift || true
case "$cmd" in
  demo)  demo_args "$@"; install_packages "${pkgs_build[@]}"; configure_and_build; demo "$@" ;;
  test)  install_packages "${pkgs_build[@]}" "${pkgs_test[@]}"; configure_and_build
         say "running the test suite (all suites but 'slow')"
         meson test -C "$build" --no-suite slow --print-errorlogs "$@" ;;
  setup) install_packages "${pkgs_build[@]}"; configure_and_build ;;
  bench) install_packages "${pkgs_build[@]}"; configure_and_build; bench/run.sh "$build" ;;
  *) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
esac
