#!/bin/sh
# llmtrain comm: env, selftest (threads), and the dump reader on the dumps
# of a selftest in which rank 1 skips collective seq 3.
set -u
bin="$1"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }

"$bin" comm env > "$tmp/env" 2>&1
check "env prints the launcher" 'grep -q "^launcher none" "$tmp/env" && grep -q "^world_size 1" "$tmp/env"'
RANK=1 WORLD_SIZE=3 LOCAL_RANK=1 "$bin" comm env > "$tmp/env2" 2>&1
check "env reads torchrun variables" 'grep -q "^launcher torchrun" "$tmp/env2" && grep -q "^rank 1" "$tmp/env2"'
"$bin" comm env extra > "$tmp/env3" 2>&1
check "env refuses an argument, naming it (exit 2)" '[ $? -eq 2 ] && grep -q "extra" "$tmp/env3"'
# under a launcher the processes are the ranks: --ranks would be ignored
RANK=0 WORLD_SIZE=2 "$bin" comm selftest --ranks 4 > "$tmp/rk" 2>&1
check "selftest --ranks under a launcher refused by name (exit 2)" '[ $? -eq 2 ] && grep -q -- "--ranks" "$tmp/rk"'

"$bin" comm selftest --ranks 4 --bytes 4096 --iters 2 > "$tmp/st" 2>&1
check "selftest passes on 4 threads" 'grep -q "selftest: ok" "$tmp/st" && grep -q "backend inproc, 4 ranks" "$tmp/st"'

"$bin" comm selftest --ranks 0 > "$tmp/bad" 2>&1
check "selftest refuses --ranks 0 (exit 2)" '[ $? -eq 2 ] || grep -q "needs an integer" "$tmp/bad"'

LLMT_LOG_LEVEL=off LLMT_FAULT_SKIP_COLLECTIVE=1:3 LLMT_COMM_DUMP_PATH="$tmp/fr" \
  "$bin" comm selftest --ranks 3 --bytes 4096 --timeout-ms 500 > "$tmp/hang" 2>&1
rc=$?
check "a skipped collective fails the selftest (exit 1)" '[ $rc -eq 1 ]'
check "the failure names rank 1 and seq 3" 'grep -q "did not reach seq 3: 1" "$tmp/hang"'
check "every rank wrote a dump" '[ -s "$tmp/fr.0" ] && [ -s "$tmp/fr.1" ] && [ -s "$tmp/fr.2" ]'
"$bin" comm dump "$tmp"/fr.* > "$tmp/dump" 2>&1
check "dump names the rank that skipped seq 3" 'grep -q "ranks that did not reach seq 3: 1(skipped to 4)" "$tmp/dump"'
"$bin" comm dump "$tmp/missing" > /dev/null 2>&1
check "dump of a missing file fails" '[ $? -eq 1 ]'
exit $fail
