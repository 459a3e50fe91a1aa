#!/bin/sh
# The example host programs (examples/README.md): hello; then, on a tiny
# corpus prepared by `llmtrain data prepare`:
#  - train_from_shards: 6 steps at once, and 3 steps then a resume to 6,
#    print identical losses for steps 4-6 (the same text, printed with %.9g:
#    the same bits), the same validation loss and the same sample;
#  - loader_only: the sample ids of 2 dp ranks are disjoint and together
#    those of 1 rank, step by step in the documented order; a state saved
#    under 2 ranks resumes on 1; a state of other shards is refused.
# usage: test_examples.sh path/to/llmtrain path/to/hello
#        path/to/train_from_shards path/to/loader_only
abs() { echo "$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; }
llmtrain=$(abs "$1")
hello=$(abs "$2")
train=$(abs "$3")
loader=$(abs "$4")
. "$(dirname "$0")/../run_lib.sh"

# ---- hello ----------------------------------------------------------------
"$hello" > hello.log 2>&1 && grep -q '^llmtrain [0-9]' hello.log && \
  grep -q '^bad dtype -> invalid argument$' hello.log && ok "hello" || { bad "hello"; cat hello.log; }

# corpus/ (any text does) in small shards, so that the loader has several
# to choose from
"$llmtrain" data prepare corpus --out prepared --tokenizer bpe:384 \
    --val-frac 0.2 --shard-tokens 8000 --filter none --dedup none --quiet \
    > prepare.log 2>&1 && ok "data prepare" || { bad "data prepare"; cat prepare.log; exit 1; }

# ---- train_from_shards ----------------------------------------------------
run() { # log, then the arguments
  log=$1; shift
  if "$train" "$@" > "$log" 2>&1; then ok "train_from_shards $*"
  else bad "train_from_shards $* (exit $?)"; cat "$log"; fi
}
run full.log prepared full 6
run part1.log prepared part 3
run part2.log prepared part 6
run part3.log prepared part 6   # nothing left to do: resumes at 6, samples

losses() { grep -E '^step +[0-9]+ \| loss' "$1" | sed 's/ | lr .*//'; }
[ "$(losses full.log | wc -l)" = 6 ] && ok "6 step lines" || bad "step lines: $(losses full.log | wc -l)"
[ "$(losses part1.log | wc -l)" = 3 ] && ok "3 step lines, then stop" || bad "first part lines"
grep -q '^no checkpoint in part: starting from step 0' part1.log && ok "fresh start" || bad "fresh start message"
grep -q '^resumed from part at step 3 ' part2.log && ok "resumed at step 3" || bad "resume message"
grep -q '^resumed from part at step 6 ' part3.log && [ "$(losses part3.log | wc -l)" = 0 ] \
  && ok "a finished run resumes at 6 and trains no more" || bad "rerun of a finished run"
losses full.log | grep -E '^step +[4-6] ' > a.txt
losses part2.log > b.txt
if [ "$(wc -l < a.txt)" = 3 ] && cmp -s a.txt b.txt; then
  ok "losses of steps 4-6: resumed run = uninterrupted run, bit for bit"
else
  bad "losses of steps 4-6 differ"; diff a.txt b.txt
fi
losses full.log | grep -E '^step +[1-3] ' > a3.txt
losses part1.log > b3.txt
cmp -s a3.txt b3.txt && ok "losses of steps 1-3 equal" || { bad "losses 1-3 differ"; diff a3.txt b3.txt; }
v1=$(grep '^step 6: val loss' full.log); v2=$(grep '^step 6: val loss' part2.log)
[ -n "$v1" ] && [ "$v1" = "$v2" ] && ok "validation loss at step 6 equal" || bad "val loss: '$v1' vs '$v2'"
sample() { sed -n '/^---- sample/,/^----$/p' "$1"; }
sample full.log > s1.txt; sample part2.log > s2.txt; sample part3.log > s3.txt
[ -s s1.txt ] && cmp -s s1.txt s2.txt && cmp -s s1.txt s3.txt \
  && ok "the same sample after the three runs" || bad "samples differ"
[ -d part/step-000000000003 ] && [ -d part/step-000000000006 ] && [ -e part/latest ] \
  && ok "checkpoints of steps 3 and 6" || bad "checkpoints: $(ls part)"
"$train" prepared 2> usage.txt >/dev/null; rc=$?
[ $rc = 2 ] && grep -q '^usage: train_from_shards' usage.txt && ok "usage" || bad "usage (exit $rc)"
"$train" nowhere ck 1 > nf.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q 'llmt_tokenizer_load.*nowhere/tokenizer.bin' nf.log \
  && ok "a missing directory is named" || { bad "missing directory (exit $rc)"; cat nf.log; }

# ---- loader_only ----------------------------------------------------------
lrun() { # log, then the arguments
  log=$1; shift
  if "$loader" "$@" > "$log" 2>&1; then ok "loader_only $*"
  else bad "loader_only $* (exit $?)"; cat "$log"; fi
}
lrun one.log prepared/train 0 1 one.state 4
lrun r0a.log prepared/train 0 2 r0.state 2
lrun r1a.log prepared/train 1 2 r1.state 2
cmp -s r0.state r1.state && ok "both ranks save the same state" || bad "rank states differ"
cp r0.state mixed.state
lrun r0b.log prepared/train 0 2 r0.state 2
lrun r1b.log prepared/train 1 2 r1.state 2
lrun mixed.log prepared/train 0 1 mixed.state 2

ids() { sed -n 's/^step [0-9]* rank [0-9]* samples: //p' "$@" | tr ' ' '\n'; }
ids one.log | sort -n > one.ids
ids r0a.log r0b.log | sort -n > r0.ids
ids r1a.log r1b.log | sort -n > r1.ids
[ "$(wc -l < one.ids)" = 32 ] && [ "$(wc -l < r0.ids)" = 16 ] && [ "$(wc -l < r1.ids)" = 16 ] \
  && ok "32 samples on 1 rank, 16 on each of 2" || bad "sample counts"
[ "$(sort -n -u one.ids | wc -l)" = 32 ] && ok "no sample repeats in 4 steps" || bad "repeats"
[ -z "$(comm -12 r0.ids r1.ids)" ] && ok "ranks 0 and 1 read disjoint samples" || bad "ranks overlap"
sort -n r0.ids r1.ids | cmp -s - one.ids && ok "ranks 0 + 1 = the 1-rank run" || bad "union differs"
stepline() { sed -n "s/^step $2 rank [0-9]* samples: //p" "$1"; }
good=1
for s in 1 2 3 4; do
  case $s in 1|2) a=r0a.log b=r1a.log ;; *) a=r0b.log b=r1b.log ;; esac
  [ "$(stepline one.log $s)" = "$(stepline $a $s) $(stepline $b $s)" ] || good=0
done
[ $good = 1 ] && ok "each step: rank 0's rows, then rank 1's, = the 1-rank step" \
  || bad "per-step layout"
grep -q '^resumed from r0.state: epoch 0, sample 16' r0b.log && ok "resume message" || bad "resume message"
[ "$(stepline mixed.log 3)" = "$(stepline one.log 3)" ] && \
  [ "$(stepline mixed.log 4)" = "$(stepline one.log 4)" ] && [ -n "$(stepline one.log 4)" ] \
  && ok "a 2-rank state resumed on 1 rank: steps 3-4 as in the 1-rank run" || bad "dp 2 -> 1 resume"
cmp -s mixed.state one.state && ok "the same final state" || bad "final states differ"
grep -q '^epoch 0 rank 1 shards: [0-9]' r1a.log && ok "assign_shards printed" || bad "assign_shards"
"$loader" prepared/val 0 1 one.state 1 > other.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q 'llmt_loader_set_state.*samples per epoch' other.log \
  && ok "a state of other shards is refused, naming why" || { bad "other shards' state (exit $rc)"; cat other.log; }

exit $fail
