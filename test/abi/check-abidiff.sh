#!/bin/sh
# Compare a library against the committed ABI baseline with libabigail.
# usage: check-abidiff.sh BASELINE.abi LIBRARY HEADERS_DIR
# Added functions are allowed (they bump ABI MINOR); any other change —
# a removed or changed function, a struct whose layout changed — fails.
# (abidiff exit bits: 1 error, 2 usage, 4 ABI change, 8 incompatible change.)
base="$1"; lib="$2"; hdrs="$3"
command -v abidiff >/dev/null || { echo "abidiff not found (apt-get install abigail-tools)"; exit 77; }
[ -f "$base" ] || { echo "no baseline at $base"; exit 1; }
out=$(abidiff --no-added-syms --headers-dir2 "$hdrs" "$base" "$lib" 2>&1)
rc=$?
echo "$out"
if [ $((rc & 3)) -ne 0 ]; then
  echo "abidiff failed to run (exit $rc)"; exit 1
fi
if [ $((rc & 8)) -ne 0 ]; then
  echo "ABI BREAK: incompatible change against $base"; exit 1
fi
if [ $((rc & 4)) -ne 0 ]; then
  echo "ABI CHANGE against $base: an existing function or type changed."
  echo "If this is intended (and nothing was released with the old layout),"
  echo "regenerate the baseline with abi/update.sh and say why in the commit."
  exit 1
fi
echo "abidiff: compatible with $base"
exit 0
