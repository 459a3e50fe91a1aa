#!/bin/sh
# Builds llm.c's CPU trainer (train_gpt2.c from $LLMC_DIR, default
# ../shared/anchors/llm.c beside the source tree) into a driver and runs
# llmc_cross against it. SKIP (77) when llm.c or a C compiler is absent.
# usage: test_llmc_cross.sh LLMC_CROSS LAYERS WIDTH HEADS MAXT B T
cross=$1; shift
src=${LLMT_SOURCE_ROOT:?}
llmc=${LLMC_DIR:-$src/../shared/anchors/llm.c}
[ -f "$llmc/train_gpt2.c" ] || { echo "SKIP: no $llmc/train_gpt2.c"; exit 77; }
cc=${CC:-cc}
command -v "$cc" >/dev/null || { echo "SKIP: no C compiler"; exit 77; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
"$cc" -O2 -fopenmp -I"$llmc" -Dmain=llmc_main -o "$tmp/llmc_driver" \
  "$src/test/train/llmc_driver.c" -lm 2> "$tmp/cc.log" \
  || { cat "$tmp/cc.log"; echo "cannot build llm.c's train_gpt2.c"; exit 1; }
OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} "$cross" "$tmp/llmc_driver" "$tmp" "$@"
