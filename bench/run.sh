#!/bin/sh
# Run every benchmark in full and write JSON results to bench/results/.
# usage: bench/run.sh [BUILD_DIR]
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
out="$top/bench/results/$(date -u +%Y%m%d-%H%M%S)"
mkdir -p "$out"
for exe in $(find "$build/bench" -maxdepth 2 -type f -name 'bench_*' -perm -u+x | sort); do
  name=$(basename "$exe")
  echo "== $name"
  "$exe" --json "$out/$name.json"
done
echo "results in $out"
