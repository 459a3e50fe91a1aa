#!/bin/sh
# Proves the ABI gates bite: the same checks that guard libllmtrain must fail
# when a symbol is removed or a public struct changes, and must pass when a
# function is only added.
# usage: gate-test.sh CHECK_SYMBOLS CHECK_ABIDIFF REAL_SYMBOLS_TXT GATE_LIB HEADERS BASELINE
check_symbols="$1"; check_abidiff="$2"; symbols="$3"; gate_lib="$4"; hdrs="$5"; baseline="$6"
command -v abidiff >/dev/null && command -v abidw >/dev/null \
  || { echo "abigail-tools not installed"; exit 77; }
CC=${CC:-cc}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
expect() { # expect pass|fail NAME CMD...
  want="$1"; name="$2"; shift 2
  out=$("$@" 2>&1); rc=$?
  if { [ "$want" = pass ] && [ $rc -eq 0 ]; } || { [ "$want" = fail ] && [ $rc -eq 1 ]; }; then
    echo "ok   $name (exit $rc)"
  else
    echo "FAIL $name: expected $want, exit $rc"; echo "$out" | sed 's/^/     /'; fail=1
  fi
  last_out="$out"
}

# A fixture library in three versions, each with its own public header.
mk() { # mk NAME STRUCT_BODY EXTRA_FUNCS
  mkdir -p "$tmp/$1/include"
  cat > "$tmp/$1/include/fx.h" <<H
typedef struct fx_opts { $2 } fx_opts;
int fx_apply(const fx_opts *o);
int fx_count(void);
$3
H
  cat > "$tmp/$1/fx.c" <<C
#include "fx.h"
int fx_apply(const fx_opts *o) { return o ? (int)sizeof *o : -1; }
$4
C
  $CC -g -O0 -shared -fPIC -I"$tmp/$1/include" -o "$tmp/$1/libfx.so" "$tmp/$1/fx.c" || exit 1
}
mk v1 "unsigned long struct_size; int a; int b;" "" "int fx_count(void) { return 2; }"
mk removed "unsigned long struct_size; int a; int b;" "" ""
mk changed "unsigned long struct_size; int a; double inserted; int b;" "" "int fx_count(void) { return 3; }"
mk added "unsigned long struct_size; int a; int b;" "int fx_new(void);" "int fx_count(void) { return 2; } int fx_new(void) { return 1; }"
abidw --headers-dir "$tmp/v1/include" --out-file "$tmp/v1.abi" "$tmp/v1/libfx.so" || exit 1

expect pass "abidiff: identical library" sh "$check_abidiff" "$tmp/v1.abi" "$tmp/v1/libfx.so" "$tmp/v1/include"
expect fail "abidiff: a function removed" sh "$check_abidiff" "$tmp/v1.abi" "$tmp/removed/libfx.so" "$tmp/removed/include"
expect fail "abidiff: a public struct changed" sh "$check_abidiff" "$tmp/v1.abi" "$tmp/changed/libfx.so" "$tmp/changed/include"
expect pass "abidiff: a function added" sh "$check_abidiff" "$tmp/v1.abi" "$tmp/added/libfx.so" "$tmp/added/include"

# The real library, linked from the same objects without llmt_dtype_name.
expect fail "symbols: libllmtrain without llmt_dtype_name" sh "$check_symbols" "$gate_lib" "$symbols"
echo "$last_out" | grep -q 'llmt_dtype_name' && echo "ok   the symbol check names the missing symbol" \
  || { echo "FAIL the symbol check does not name llmt_dtype_name"; fail=1; }
expect fail "abidiff: libllmtrain without llmt_dtype_name" sh "$check_abidiff" "$baseline" "$gate_lib" "$hdrs"
echo "$last_out" | grep -q 'llmt_dtype_name' && echo "ok   abidiff names the removed function" \
  || { echo "FAIL abidiff does not name llmt_dtype_name"; fail=1; }
exit $fail
