#!/bin/sh
# Compare the dynamic symbols a library defines with abi/symbols.txt.
# usage: check-symbols.sh LIBRARY SYMBOLS_TXT
# Fails if a listed symbol is missing (an ABI break), if an unlisted one is
# exported (add it to symbols.txt with the version that adds it), or if any
# exported symbol lacks the llmt_ prefix.
lib="$1"; list="$2"
command -v nm >/dev/null || { echo "nm not found"; exit 77; }
[ -f "$lib" ] || { echo "no library at $lib"; exit 1; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk '$2 ~ /^[TDBRVWi]$/ {sub(/@.*/, "", $3); print $3}' \
  | grep -vE '^(_init|_fini|_edata|_end|__bss_start)$' | sort -u > "$tmp/have"
grep -vE '^\s*(#|$)' "$list" | awk '{print $1}' | sort -u > "$tmp/want"
rc=0
missing=$(comm -13 "$tmp/have" "$tmp/want")
extra=$(comm -23 "$tmp/have" "$tmp/want")
foreign=$(grep -vE '^llmt_[a-z0-9]' "$tmp/have")
if [ -n "$missing" ]; then
  echo "ABI BREAK: listed in $list but not exported by $lib:"; echo "$missing" | sed 's/^/  /'; rc=1
fi
if [ -n "$extra" ]; then
  echo "exported but not listed in $list (add with the version that adds them):"; echo "$extra" | sed 's/^/  /'; rc=1
fi
if [ -n "$foreign" ]; then
  echo "exported without the llmt_ prefix (llmt__ is internal):"; echo "$foreign" | sed 's/^/  /'; rc=1
fi
grep -vE '^\s*(#|$)' "$list" | awk 'NF < 2 {print "no version for " $1; bad=1} END {exit bad}' || rc=1
[ $rc -eq 0 ] && echo "symbols: $(wc -l < "$tmp/have") exported, all listed, all llmt_"
exit $rc
