# The preamble and the checks the test/mpi scripts share; sourced by a
# script after it sets exe (the llmtrain executable, an absolute path):
#   . "$(dirname "$0")/mpi_lib.sh"
# Without mpirun the script exits 77 (SKIP). Otherwise test/run_lib.sh's
# preamble: it runs from a temporary directory holding corpus/, ok and bad
# print a result (bad sets fail, the script's exit status at its end).
command -v mpirun >/dev/null 2>&1 || { echo "no mpirun: skip"; exit 77; }
mpi_here=$(cd "$(dirname "$0")" && pwd) # before run_lib.sh leaves for $tmp
. "$(dirname "$0")/../run_lib.sh"

# mpi_train NP ARGS...: `mpirun -np NP llmtrain train ARGS...`, oversubscribed
# (CI has 2 cores), with a communicator timeout that a loaded machine meets
mpi_train() {
  mpi_np=$1; shift
  OMPI_MCA_btl_vader_single_copy_mechanism=none LLMT_COMM_TIMEOUT_MS=120000 \
    mpirun -np "$mpi_np" --oversubscribe --allow-run-as-root -x LLMT_COMM_TIMEOUT_MS \
    "$exe" train "$@"
}

# mpi_spec FILE NAME MODEL BATCH PARALLELISM STEPS [TRAIN [TOKENIZER [CKPT]]]:
# the tiny job the scripts train, written to FILE: NAME; MODEL, BATCH and
# PARALLELISM the keys of those objects (JSON without the braces); STEPS
# steps of AdamW at lr 3e-3 (cosine, 2 warmup steps), seed 5, one thread,
# on corpus/. TRAIN: the other train keys (default: a validation of 2
# batches and a log line every 3 steps, 8 sampled tokens); TOKENIZER: its
# object (default byte-level); CKPT: the checkpoint keys beside its dir
# (default: every 3 steps, synchronous). Metrics to metrics.jsonl, plotted.
mpi_spec() {
  mpi_tr='"eval_interval": 3, "eval_batches": 2, "log_interval": 3, "sample_tokens": 8'
  mpi_tok='{"kind": "byte"}'
  mpi_ck='"interval": 3, "async": false'
  [ -z "$7" ] || mpi_tr=$7
  [ -z "$8" ] || mpi_tok=$8
  [ -z "$9" ] || mpi_ck=$9
  cat > "$1" <<JSON
{"name": "$2",
 "model": {$3},
 "batch": {$4},
 "parallelism": {$5},
 "optimizer": {"lr": 3e-3},
 "schedule": {"kind": "cosine", "warmup_steps": 2},
 "train": {"steps": $6, "seed": 5, "threads": 1, $mpi_tr},
 "data": {"train": "$tmp/corpus", "tokenizer": $mpi_tok},
 "checkpoint": {"dir": "ckpt", $mpi_ck},
 "hardware": {"gpu": "cpu"},
 "metrics": {"jsonl": "metrics.jsonl", "plot": "loss.svg"}}
JSON
}

# ext METRICS: "step loss|val_loss value" for each loss of a metrics.jsonl
ext() { sed -n 's/.*"step":\([0-9]*\),"\(loss\|val_loss\)":\([-0-9.e]*\).*/\1 \2 \3/p' "$1"; }

# cmp_losses A B WHAT: the same steps and kinds, each loss within 1e-5
# relative plus the 1e-6 of the 6 decimals metrics.jsonl prints; prints the
# worst relative difference, then ok or bad WHAT (with both lists)
cmp_losses() {
  if [ -s "$1" ] && [ "$(wc -l < "$1")" = "$(wc -l < "$2")" ] &&
     paste "$1" "$2" | awk '{d = $3 - $6; if (d < 0) d = -d; r = d / ($3 < 0 ? -$3 : $3);
                             if ($1 != $4 || $2 != $5 || d > 1e-5 * ($3 < 0 ? -$3 : $3) + 1e-6) bad = 1;
                             if (r > m) m = r} END {printf "max relative loss diff %.2g\n", m; exit bad}'; then
    ok "$3"
  else
    bad "$3"; paste "$1" "$2"
  fi
}

# resume_one RUN OK_WHAT BAD_WHAT: ref/ and RUN/ (6 steps each, checkpoint
# at step 6) resumed by one process on ref8.json (8 steps): steps 7-8 of
# RUN's checkpoint against the one-process run continued the same way
resume_one() {
  cp -r ref ref8 && cp -r "$1" "$1"8 || exit 1
  "$exe" train ref8.json --out ref8 --resume > ref8.log 2>&1 && ok "one process, steps 7-8" ||
    { bad "one process resume"; cat ref8.log; }
  "$exe" train ref8.json --out "$1"8 --resume > "$1"8.log 2>&1 && ok "$2" ||
    { bad "$3"; cat "$1"8.log; }
  ext ref8/metrics.jsonl | awk '$1 > 6' > c.txt
  ext "$1"8/metrics.jsonl | awk '$1 > 6' > d.txt
  cmp_losses c.txt d.txt "resumed losses equal"
}

# mpi_sample LOG: the text a `llmtrain train` log sampled at its end
mpi_sample() { awk '/^---- sample/ {f = 1; next} /^----$/ {f = 0} f' "$1"; }

# mpi_vs_one TAG REF RUN NP WHAT LAYOUT: REF.json trained by one process
# (run directory REF) and RUN.json under mpirun -np NP (run directory RUN;
# WHAT says what it splits); RUN's log names the layout (LAYOUT, a fixed
# string), both sample the same text, and every training and validation
# loss agrees (cmp_losses). Each result is prefixed "TAG: ".
mpi_vs_one() {
  "$exe" train "$2.json" --out "$2" > "$2.log" 2>&1 && ok "$1: one process" ||
    { bad "$1: one process"; cat "$2.log"; }
  mpi_train "$4" "$3.json" --out "$3" > "$3.log" 2>&1 && ok "$1: mpirun -np $4 ($5)" ||
    { bad "$1: mpirun -np $4"; cat "$3.log"; }
  grep -qF "$6" "$3.log" && ok "$1: the layout in the log" ||
    { bad "$1: no layout"; head -5 "$3.log"; }
  mpi_s1=$(mpi_sample "$2.log") mpi_s2=$(mpi_sample "$3.log")
  [ -n "$mpi_s1" ] && [ "$mpi_s1" = "$mpi_s2" ] && ok "$1: the same sample" ||
    bad "$1: sample '$mpi_s2', one process '$mpi_s1'"
  ext "$2/metrics.jsonl" > "$2.loss"
  ext "$3/metrics.jsonl" > "$3.loss"
  cmp_losses "$2.loss" "$3.loss" "$1: losses equal one process's (train and validation)"
}

# mpi_pair REF RUN NP WHAT: REF.json trained by one process (run directory
# REF) and RUN.json under mpirun -np NP (run directory RUN; WHAT names its
# layout), each an ok or a bad with its log
mpi_pair() {
  "$exe" train "$1.json" --out "$1" > "$1.log" 2>&1 && ok "one process" ||
    { bad "one process"; cat "$1.log"; }
  mpi_train "$3" "$2.json" --out "$2" > "$2.log" 2>&1 && ok "mpirun -np $3 ($4)" ||
    { bad "mpirun -np $3"; cat "$2.log"; }
}

# mpi_pair_sample REF RUN: the text RUN.log sampled at its end is REF.log's
# and not empty (ok or bad)
mpi_pair_sample() {
  mpi_s1=$(mpi_sample "$1.log") mpi_s2=$(mpi_sample "$2.log")
  [ -n "$mpi_s1" ] && [ "$mpi_s1" = "$mpi_s2" ] && ok "the same sample as one process" ||
    bad "sample '$mpi_s2', one process '$mpi_s1'"
}

# mpi_pair_losses REF RUN: every training and validation loss of RUN's
# metrics.jsonl against REF's (cmp_losses)
mpi_pair_losses() {
  ext "$1/metrics.jsonl" > a.txt
  ext "$2/metrics.jsonl" > b.txt
  cmp_losses a.txt b.txt "losses equal one process's (train and validation)"
}

# mpi_pair_params REF RUN: the step-6 checkpoints of REF and RUN exported
# to safetensors, RUN's parameters within cmp_params.py's bounds of REF's
mpi_pair_params() {
  "$exe" ckpt export "$1/ckpt" --step 6 --out "$1.st" > export.log 2>&1 &&
    "$exe" ckpt export "$2/ckpt" --step 6 --out "$2.st" >> export.log 2>&1 &&
    ok "step-6 checkpoints exported" || { bad "export"; cat export.log; }
  python3 "$mpi_here/cmp_params.py" "$1.st" "$2.st" && ok "step-6 parameters equal one process's" ||
    bad "step-6 parameters differ"
}

# mpi_moe_counts RUN REF WANT DROPS AUX WHAT: the {"event":"moe"} lines of
# RUN's and REF's metrics.jsonl, 6 each; in every step of RUN the kept
# counts plus the drops are WANT (the global batch's choices) and both
# equal REF's; DROPS "some": some step drops, "none": no step does; AUX 1:
# the aux loss within 1e-5 relative (+ 1e-6) of REF's. ok or bad WHAT.
mpi_moe_counts() {
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" "$4" "$5" <<'PY' && ok "$6" || bad "$6"
import json, sys
def moe(p):
    return [l for l in map(json.loads, open(p)) if l.get("event") == "moe"]
run, ref = moe(sys.argv[1]), moe(sys.argv[2])
want, drops, aux = int(sys.argv[3]), sys.argv[4], sys.argv[5] == "1"
bad = len(run) != 6 or len(ref) != 6
for a, b in zip(run, ref):
    bad |= sum(a["tokens_per_expert"]) + a["dropped"] != want
    bad |= a["dropped"] != b["dropped"] or a["tokens_per_expert"] != b["tokens_per_expert"]
    if aux:
        bad |= abs(a["aux_loss"] - b["aux_loss"]) > 1e-5 * abs(b["aux_loss"]) + 1e-6
    print("step %d: kept %s dropped %d aux %g (one process: %s, %d, %g)" % (
        a["step"], a["tokens_per_expert"], a["dropped"], a.get("aux_loss", 0),
        b["tokens_per_expert"], b["dropped"], b.get("aux_loss", 0)))
if drops == "some":
    bad |= not any(l["dropped"] > 0 for l in run)
else:
    bad |= any(l["dropped"] != 0 for l in run)
sys.exit(1 if bad else 0)
PY
}
