#!/bin/sh
# No silent no-ops on the command line: a value flag given twice (the
# second would silently replace the first), a step range past the integer
# range, and a pair of flags whose one has no effect beside the other are
# usage errors (exit 2) naming the flag; their accepted twins are not.
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
fail=0
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
ok() { printf 'ok   %s\n' "$1"; }
bad() { printf 'FAIL %s\n' "$1"; fail=1; }

# usage ERROR_PATTERN ARGS...: exit 2 and stderr matching the pattern
usage() {
  pat=$1; shift
  "$exe" "$@" > out.txt 2> err.txt
  rc=$?
  if [ $rc -eq 2 ] && grep -Eq -- "$pat" err.txt; then
    ok "$*"
  else
    bad "$* (exit $rc, wanted 2 and /$pat/): $(head -c 300 err.txt)"
  fi
}

# accepted ARGS...: not refused as a usage error (a missing spec or
# directory fails later, with exit 1)
accepted() {
  "$exe" "$@" > out.txt 2> err.txt
  rc=$?
  [ $rc -ne 2 ] && ok "accepted: $*" || bad "accepted: $* (exit 2): $(head -c 300 err.txt)"
}

usage "'--steps'" train none.json --steps 3 --steps 4
usage "'--out'" train none.json --out a --steps 3 --out b
usage "'--threads'" train none.json --threads 1 --threads 2
usage "'--prom'" train none.json --prom a.prom --prom b.prom
usage "'--trace'" train none.json --trace 1-2 --trace 3
usage "--trace 1-99999999999999999999" train none.json --trace 1-99999999999999999999
accepted train none.json --steps 3 --out a
# llmtrain launch adds --resume to a restarted worker's own flags
accepted train none.json --resume --resume
# launch refuses a repeated value flag itself, before any worker starts
# (they would each refuse a repeated --steps or --threads), and keeps
# --resume repeatable as train does
usage "'--steps'" launch none.json --steps 3 --steps 4
usage "'--threads'" launch none.json --threads 1 --out a --threads 2
usage "'--nproc'" launch none.json --nproc 2 --nproc 4
usage "'--out'" launch none.json --out a --out b
accepted launch none.json --resume --resume --steps 3 --threads 1

usage "--world given twice" plan none.json --world 2 --world 4
usage "--seed given twice" plan none.json --simulate --seed 3 --seed 4
accepted plan none.json --world 2 --simulate --seed 3

usage "--out.*'--out'" report rundir --out a.html --out b.html
accepted report rundir --out a.html

usage "--out given twice" data prepare in.txt -o a --out b
usage "--seed given twice" data prepare in.txt --seed 1 --seed 2
usage "--val-frac given twice" data prepare in.txt --val-frac 0.1 --val-frac 0.2
accepted data prepare in.txt -o a --seed 1 --val-frac 0.1

# --text-field is read from JSONL inputs only, --doc-sep from text only
printf 'one doc\n%%\nanother doc\n' > a.txt
printf '{"text": "a record"}\n' > b.jsonl
mkdir -p dir && cp a.txt dir/
usage "--text-field applies to JSONL" data prepare a.txt --text-field body --out p1
usage "--text-field applies to JSONL" data prepare dir --text-field body --out p2
usage "--doc-sep applies to text" data prepare b.jsonl --doc-sep % --out p3
usage "--text-field applies to JSONL" data train-bpe a.txt --vocab 300 --text-field body --out t.bin
accepted data prepare a.txt b.jsonl --text-field text --doc-sep % --out p4 -q
accepted data prepare dir --doc-sep % --out p5 -q

usage "-o given twice" ckpt export ck --out a -o b
usage "--step given twice" ckpt inspect ck --step 1 --step 2
usage "--keep-every 5 has no effect with --keep-last 0" ckpt prune ck --keep-last 0 --keep-every 5
accepted ckpt prune ck --keep-last 2 --keep-every 5
accepted ckpt ls ck --json --json

exit $fail
