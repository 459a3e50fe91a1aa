#!/bin/sh
# Regenerate abi/symbols.txt and abi/libllmtrain.abi from a built library.
# usage: abi/update.sh [BUILD_DIR]   (default: build)
#
# symbols.txt keeps, for every exported symbol, the project version that
# first exported it (as curl's symbols-in-versions does): existing lines keep
# their version, new symbols get the current one. The baseline is what
# test/abi/check-abidiff.sh compares against: regenerate it only for a change
# you mean (new functions do not need it; changed types do), and say why in
# the commit message.
set -eu
top=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$top/build}
lib="$build/libllmtrain.so"
[ -f "$lib" ] || { echo "no $lib: build first" >&2; exit 1; }
ver=$(sed -n 's/^#define LLMT_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' "$top/include/llmtrain.h" | paste -sd.)
tmp=$(mktemp)
nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVWi]$/ {sub(/@.*/, "", $3); print $3}' \
  | grep -E '^llmt_[a-z0-9]' | sort -u > "$tmp"
{
  echo "# Exported symbols of libllmtrain and the version that added each."
  echo "# Checked by test/abi/check-symbols.sh; regenerate with abi/update.sh."
  while read -r s; do
    v=$(awk -v s="$s" '$1 == s {print $2}' "$top/abi/symbols.txt" 2>/dev/null)
    printf '%s %s\n' "$s" "${v:-$ver}"
  done < "$tmp"
} > "$top/abi/symbols.txt.new"
mv "$top/abi/symbols.txt.new" "$top/abi/symbols.txt"
rm -f "$tmp"
abidw --headers-dir "$top/include" --out-file "$top/abi/libllmtrain.abi" "$lib"
echo "updated abi/symbols.txt ($(grep -c '^llmt_' "$top/abi/symbols.txt") symbols) and abi/libllmtrain.abi"
