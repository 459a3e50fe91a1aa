#!/bin/sh
# Recovery from broken checkpoints through the CLI, as a user meets it
# (issue 14): a corrupt newest step (truncated data, garbage manifest,
# deleted data file, a chunk past the end of its file, 16 bytes flipped
# inside a tensor: found by the checksums only while the step is read)
# must neither wedge the resumed run nor lose data; the same with two
# ranks (llmtrain launch --nproc 2, dp 2, ZeRO-0 and ZeRO-1) when only
# rank 1's file is flipped; every step corrupt must refuse to resume
# and keep metrics.jsonl until --fresh; `ckpt verify` checks that chunks
# cover every tensor and reports an interrupted save as incomplete without
# failing; `ckpt prune` keeps the newest verified step; numeric flags are
# parsed strictly. The runbook's two recovery procedures are extracted
# from doc/runbook.md and executed as written.
# usage: test_recovery.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
src=${LLMT_SOURCE_ROOT:?}
. "$(dirname "$0")/../run_lib.sh"
command -v python3 >/dev/null || { echo "SKIP: python3 edits the manifests"; exit 77; }

cat > spec.json <<JSON
{"name": "recovery",
 "model": {"arch": "gpt2", "layers": 2, "hidden": 64, "heads": 4,
           "vocab": 512, "seq_len": 32},
 "batch": {"micro": 4, "grad_accum": 1},
 "optimizer": {"lr": 3e-3},
 "schedule": {"kind": "cosine", "warmup_steps": 2},
 "train": {"steps": 12, "seed": 7, "eval_interval": 0, "log_interval": 0,
           "threads": 1, "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "bpe", "vocab_size": 512}},
 "checkpoint": {"dir": "ckpt", "interval": 3, "async": true,
                "tiers": [{"kind": "local", "keep_last": 3}]},
 "hardware": {"gpu": "cpu"},
 "metrics": {"jsonl": "metrics.jsonl", "plot": "loss.svg"}}
JSON
step() { printf '%s/ckpt/step-%012d' "$1" "$2"; }
# flip.py STEPDIR FILE: 16 bytes flipped in the middle of the chunk in FILE
# (at an offset > 4096, past the header) of the middle tensor of those
# that have one there; prints the tensor's name
cat > flip.py <<'PY'
import json, sys
d, fname = sys.argv[1], sys.argv[2]
m = json.load(open(d + "/manifest.json"))
cands = [(t["name"], c) for t in m["tensors"] for c in t["chunks"]
         if c["file"] == fname and c["length"] >= 64 and c["offset"] > 4096]
name, c = cands[len(cands) // 2]
off = c["offset"] + c["length"] // 2
with open(d + "/" + fname, "r+b") as f:
    f.seek(off)
    b = f.read(16)
    f.seek(off)
    f.write(bytes(x ^ 0xFF for x in b))
print(name)
PY
# "step loss" of every step line, the latest line per step
losses() { sed -n 's/.*"step":\([0-9]*\),"loss":\([-0-9.e]*\).*/\1 \2/p' "$1" |
           awk '{v[$1] = $2} END {for (s in v) print s, v[s]}' | sort -n; }

# the reference: 12 steps in one go; and a prepared copy stopped at 9
# (checkpoints 3, 6, 9) that every case below starts from
"$exe" train spec.json --out ref > ref.log 2>&1 || { bad "reference run"; cat ref.log; exit 1; }
losses ref/metrics.jsonl > ref.txt
"$exe" train spec.json --out base --steps 9 > base.log 2>&1 || { bad "run to 9"; cat base.log; exit 1; }
[ -d "$(step base 3)" ] && [ -d "$(step base 9)" ] && ok "checkpoints 3, 6, 9" ||
  { bad "checkpoints: $(ls base/ckpt)"; exit 1; }

# The edit drops the manifest's digest (a manifest of before digests,
# which loads as one): the field checks, not the digest, refuse it.
edit_manifest() { # dir python-expression-on-m
  python3 - "$1/manifest.json" "$2" <<'PY'
import json, sys
p, expr = sys.argv[1], sys.argv[2]
m = json.load(open(p))
m.pop("digest", None)
exec(expr)
open(p, "w").write(json.dumps(m))
PY
}

# 1. a corrupt newest checkpoint: resume falls back to 6, retrains 7..9,
#    saves 9 again (the broken 9 goes to quarantine) and ends at 12 with
#    the losses of the uninterrupted run
corrupt() { # case run
  s9=$(step "$2" 9)
  case $1 in
    truncated) truncate -s -4096 "$s9/rank-00000.bin" ;;
    garbage-manifest) printf 'not json {{{' > "$s9/manifest.json" ;;
    deleted-data) rm "$s9/rank-00000.bin" ;;
    chunk-past-eof) edit_manifest "$s9" 'm["tensors"][0]["chunks"][0]["offset"] = 1 << 40' ;;
    flipped) python3 flip.py "$s9" rank-00000.bin > flipped.tensor && cp "$s9/rank-00000.bin" flipped.bin ;;
  esac
}
for c in truncated garbage-manifest deleted-data chunk-past-eof flipped; do
  rm -rf "$c" && cp -r base "$c"
  corrupt $c $c
  if "$exe" train spec.json --out $c --resume > $c.log 2>&1; then
    ok "$c: resume ran to the end"
  else
    bad "$c: resume failed"; tail -5 $c.log
  fi
  grep -q "resumed from .* at step 6" $c.log && ok "$c: fell back to step 6" ||
    bad "$c: did not resume at 6: $(grep resumed $c.log)"
  q=$(ls -d $c/ckpt/quarantine/step-000000000009.* 2>/dev/null | head -1)
  [ -n "$q" ] && grep -q '^reason: ' "$q/REASON" && ok "$c: step 9 quarantined with a reason" ||
    bad "$c: no quarantined step 9: $(ls $c/ckpt $c/ckpt/quarantine 2>&1)"
  if [ $c = flipped ]; then # the warning names the step, the file, the tensor and why
    t=$(cat flipped.tensor)
    grep -q "skipping step 9: .*tensor '$t' .*step-000000000009/rank-00000.bin.*checksum mismatch" $c.log &&
      ok "flipped: the warning names step 9, rank-00000.bin, tensor $t, checksum mismatch" ||
      { bad "flipped: no warning naming step 9 and tensor $t"; grep -i warn $c.log; }
    [ -n "$q" ] && grep -q "reason: .*tensor '$t'.*checksum mismatch" "$q/REASON" &&
      cmp -s "$q/rank-00000.bin" flipped.bin && ok "flipped: REASON names the tensor; the bytes are kept" ||
      bad "flipped: quarantine REASON or data file"
  fi
  losses $c/metrics.jsonl > $c.txt
  cmp -s ref.txt $c.txt && ok "$c: losses of steps 1..12 equal the uninterrupted run" ||
    { bad "$c: losses differ"; diff ref.txt $c.txt | head -5; }
  "$exe" ckpt verify $c/ckpt > $c.verify 2>&1 && ok "$c: every committed step verifies" ||
    { bad "$c: verify after recovery"; cat $c.verify; }
  # a second resume (nothing left to do) does not wedge either
  "$exe" train spec.json --out $c --resume > $c.again 2>&1 && ok "$c: resuming again is fine" ||
    { bad "$c: second resume"; tail -3 $c.again; }
done

# 2. every checkpoint corrupt: refuse, list each step and why, change
#    nothing; --fresh starts over and appends to metrics.jsonl
rm -rf all && cp -r base all
for s in 3 6 9; do printf 'garbage' > "$(step all $s)/manifest.json"; done
cp all/metrics.jsonl metrics.before
"$exe" train spec.json --out all --resume > all.log 2>&1; rc=$?
[ $rc = 1 ] && ok "all corrupt: --resume refuses (exit 1)" || bad "all corrupt: exit $rc"
grep -q "step 9: .*not valid JSON" all.log && grep -q "step 6: " all.log && grep -q "step 3: " all.log &&
  ok "all corrupt: each step listed with its reason" || { bad "all corrupt: listing"; cat all.log; }
grep -q -- "--fresh" all.log && ok "all corrupt: the message names --fresh" || bad "no --fresh hint"
cmp -s metrics.before all/metrics.jsonl && ok "all corrupt: metrics.jsonl untouched" ||
  bad "all corrupt: metrics.jsonl changed"
[ -d "$(step all 9)" ] && [ ! -d all/ckpt/quarantine ] && ok "all corrupt: nothing moved" ||
  bad "all corrupt: directories moved without --fresh"
"$exe" train spec.json --out all --resume --fresh > fresh.log 2>&1 && ok "--fresh runs" ||
  { bad "--fresh"; tail -5 fresh.log; }
[ "$(ls -d all/ckpt/quarantine/step-* | wc -l)" = 3 ] && ok "--fresh quarantined the 3 broken steps" ||
  bad "quarantine: $(ls all/ckpt/quarantine)"
n0=$(wc -l < metrics.before)
head -n "$n0" all/metrics.jsonl | cmp -s - metrics.before && [ "$(wc -l < all/metrics.jsonl)" -gt "$n0" ] &&
  ok "--fresh appended to metrics.jsonl (old lines kept)" || bad "metrics.jsonl rewritten"
losses all/metrics.jsonl > all.txt
cmp -s ref.txt all.txt && ok "--fresh run = the reference run" || bad "--fresh losses differ"

# 2b. every step unusable, the newest only by a flipped tensor (found while
#     it is read): refused, each step listed (the flip with its tensor),
#     nothing moved; --resume --fresh then moves them all to quarantine but
#     stops (exit 1: part of step 9 was read into the model, so step 0's
#     state is gone from that process) asking to run again; the rerun
#     starts from step 0 and equals the reference
rm -rf allf && cp -r base allf
t=$(python3 flip.py "$(step allf 9)" rank-00000.bin)
for s in 3 6; do printf 'garbage' > "$(step allf $s)/manifest.json"; done
"$exe" train spec.json --out allf --resume > allf.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q "step 9: .*tensor '$t'.*checksum mismatch" allf.log &&
  grep -q "step 6: .*not valid JSON" allf.log && grep -q "step 3: " allf.log && grep -q -- "--fresh" allf.log &&
  ok "flip + all corrupt: --resume refuses (exit 1), each step listed, step 9 with its tensor" ||
  { bad "flip + all corrupt: exit $rc"; cat allf.log; }
[ -d "$(step allf 9)" ] && [ ! -d allf/ckpt/quarantine ] && ok "flip + all corrupt: nothing moved" ||
  bad "flip + all corrupt: directories moved without --fresh"
"$exe" train spec.json --out allf --resume --fresh > allf2.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q "run the same command again" allf2.log &&
  [ "$(ls -d allf/ckpt/quarantine/step-* | wc -l)" = 3 ] &&
  ok "flip + all corrupt: --fresh quarantined the 3 steps and asks for a new start" ||
  { bad "flip + all corrupt: --fresh (exit $rc)"; cat allf2.log; ls allf/ckpt allf/ckpt/quarantine; }
"$exe" train spec.json --out allf --resume --fresh > allf3.log 2>&1 && ok "flip + all corrupt: the rerun runs" ||
  { bad "flip + all corrupt: rerun"; tail -5 allf3.log; }
losses allf/metrics.jsonl > allf.txt
cmp -s ref.txt allf.txt && ok "flip + all corrupt: the rerun = the reference run" ||
  { bad "flip + all corrupt: losses differ"; diff ref.txt allf.txt | head -5; }

# 3. a fresh run over valid checkpoints is still refused; --fresh too
"$exe" train spec.json --out base --fresh > f2.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q "valid checkpoint" f2.log && ok "--fresh over a valid checkpoint refused" ||
  { bad "--fresh over valid (exit $rc)"; cat f2.log; }

# 4. strict numbers
for v in -5 0 abc 3x ""; do
  "$exe" train spec.json --out strict --steps "$v" > strict.log 2>&1; rc=$?
  [ $rc = 2 ] && grep -q -- "--steps needs an integer" strict.log && ok "--steps '$v' refused" ||
    { bad "--steps '$v' (exit $rc)"; cat strict.log; }
done
[ ! -d strict ] && ok "nothing created for a bad flag" || bad "strict/ was created"
"$exe" train spec.json --out strict --steps 1000 > strict.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q "beyond train.steps 12" strict.log && ok "--steps 1000 > train.steps refused" ||
  { bad "--steps 1000 (exit $rc)"; cat strict.log; }
"$exe" train spec.json --out strict --threads 2x > strict.log 2>&1; rc=$?
[ $rc = 2 ] && ok "--threads 2x refused" || bad "--threads 2x (exit $rc)"

# 5. coverage: a tensor whose chunk list lost its entries
rm -rf cov && cp -r base cov
edit_manifest "$(step cov 9)" 'm["tensors"][1]["chunks"] = []'
"$exe" ckpt verify cov/ckpt > cov.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q "step 9: BAD.*cover 0 of" cov.log && ok "verify: uncovered tensor is BAD" ||
  { bad "verify coverage (exit $rc)"; cat cov.log; }
"$exe" train spec.json --out cov --resume > covr.log 2>&1 && grep -q "at step 6" covr.log &&
  ok "resume skips the uncovered step" || { bad "resume over uncovered"; tail -3 covr.log; }

# 6. an interrupted save (no manifest) is reported, not failed; a corrupt
#    committed step still fails verify
rm -rf crash && cp -r base crash
mkdir "$(step crash 12)" && head -c 8192 "$(step crash 9)/rank-00000.bin" > "$(step crash 12)/rank-00000.bin"
"$exe" ckpt verify crash/ckpt > crash.log 2>&1; rc=$?
[ $rc = 0 ] && grep -q "step 12: incomplete" crash.log && ok "verify: interrupted save reported, exit 0" ||
  { bad "verify after a crash (exit $rc)"; cat crash.log; }
printf 'x' > "$(step crash 3)/manifest.json"
"$exe" ckpt verify crash/ckpt > crash.log 2>&1; rc=$?
[ $rc = 1 ] && ok "verify: a corrupt committed step still fails" || bad "verify missed a corrupt step"

# 7. prune keeps the newest verified step when corrupt ones are newer
rm -rf pr && cp -r base pr
printf 'x' > "$(step pr 9)/manifest.json"
"$exe" ckpt prune pr/ckpt --keep-last 1 > pr.log 2>&1 || { bad "prune"; cat pr.log; }
[ -d "$(step pr 6)" ] && ok "prune kept step 6, the newest verified" || bad "prune removed step 6"
[ ! -d "$(step pr 3)" ] && ok "prune removed step 3" || bad "prune kept step 3"

# 9 (run here, before 8). two ranks: llmtrain launch --nproc 2 (dp 2 over
#    Gloo, ZeRO-0: every rank reads every tensor; ZeRO-1: rank 1 alone
#    reads its moments' share) with 16 bytes of rank 1's file of step 9
#    flipped: both ranks skip step 9 together, resume from 6, step 9 goes to
#    quarantine once (naming rank-00001.bin), the losses equal the
#    uninterrupted 2-rank run's
if "$exe" features 2>/dev/null | grep -qw gloo; then
  for z in 0 1; do
    sed "s/\"batch\": {\"micro\": 4, \"grad_accum\": 1}/\"parallelism\": {\"dp\": 2, \"zero\": $z}, \"batch\": {\"micro\": 2, \"grad_accum\": 1}/" \
      spec.json > dp$z.json
    grep -q '"dp": 2' dp$z.json || { bad "dp 2 spec"; break; }
    "$exe" launch --out dref$z --nproc 2 dp$z.json > dref$z.log 2>&1 ||
      { bad "zero $z: 2-rank reference run"; tail -5 dref$z.log; continue; }
    losses dref$z/metrics.jsonl > dref$z.txt
    "$exe" launch --out d$z --nproc 2 --steps 9 dp$z.json > d$z.log 2>&1 ||
      { bad "zero $z: 2-rank run to 9"; tail -5 d$z.log; continue; }
    t=$(python3 flip.py "$(step d$z 9)" rank-00001.bin)
    "$exe" launch --out d$z --nproc 2 --resume dp$z.json > d$z.resume 2>&1 &&
      ok "zero $z: 2 ranks, rank 1's file flipped: the resume ran to the end" ||
      { bad "zero $z: 2-rank resume failed"; tail -5 d$z.resume; }
    n=$(cat d$z/metrics.jsonl d$z/rank-1/metrics.jsonl | grep -c '"event":"restore","tier":"local","step":6')
    [ "$n" = 2 ] && grep -q "resumed from .* at step 6" d$z.resume &&
      ok "zero $z: both ranks resumed from step 6" || { bad "zero $z: restore lines at 6: $n"; cat d$z.resume; }
    q=$(ls -d d$z/ckpt/quarantine/step-000000000009.* 2>/dev/null)
    [ "$(echo "$q" | wc -w)" = 1 ] && grep -q "tensor '$t'.*rank-00001.bin.*checksum mismatch" "$q/REASON" &&
      [ -f "$q/rank-00001.bin" ] && ok "zero $z: step 9 quarantined once, REASON names rank-00001.bin and $t" ||
      bad "zero $z: quarantine: $(ls d$z/ckpt/quarantine 2>&1)"
    losses d$z/metrics.jsonl > d$z.txt
    cmp -s dref$z.txt d$z.txt && ok "zero $z: losses equal the uninterrupted 2-rank run's" ||
      { bad "zero $z: losses differ"; diff dref$z.txt d$z.txt | head -5; }
  done
else
  echo "skip: the 2-rank cases (no gloo in this build)"
fi

# 8. the runbook's procedures, extracted and run as written: each command
#    line of the marked block, with the exit status its comment names
procedure() { # name run
  awk -v want="<!-- procedure: $1 -->" '
    $0 == want {on = 1; next}
    on && /^```sh/ {code = 1; next}
    code && /^```/ {exit}
    code {print}' "$src/doc/runbook.md" > proc.$1
  [ -s proc.$1 ] || { bad "runbook: procedure $1 not found"; return; }
  while IFS= read -r line; do
    case $line in ''|'#'*) continue ;; esac
    want=0
    case $line in *'(exit '[0-9]')'*) want=$(printf '%s' "$line" | sed 's/.*(exit \([0-9]\)).*/\1/') ;; esac
    cmd=$(printf '%s' "${line%%#*}" | sed "s|llmtrain |\"$exe\" |; s|SPEC|spec.json|g; s|RUN|$2|g")
    sh -c "$cmd" > proc.out 2>&1; rc=$?
    [ $rc = "$want" ] && ok "runbook $1: ${line%%#*}" ||
      { bad "runbook $1: '${line%%#*}' exit $rc, want $want"; tail -5 proc.out; }
  done < proc.$1
}
rm -rf rb1 && cp -r base rb1 && truncate -s 8192 "$(step rb1 9)/rank-00000.bin"
procedure newest-corrupt rb1
losses rb1/metrics.jsonl > rb1.txt
cmp -s ref.txt rb1.txt && ok "runbook newest-corrupt: the run ends as the reference" || bad "rb1 losses"
rm -rf rb3 && cp -r base rb3 && python3 flip.py "$(step rb3 9)" rank-00000.bin > /dev/null
procedure newest-corrupt rb3
losses rb3/metrics.jsonl > rb3.txt
cmp -s ref.txt rb3.txt && ok "runbook newest-corrupt on a flipped tensor: the run ends as the reference" ||
  bad "rb3 losses"
rm -rf rb2 && cp -r base rb2
for s in 3 6 9; do truncate -s 4096 "$(step rb2 $s)/rank-00000.bin"; done
procedure all-corrupt rb2
[ -d "$(step rb2 12)" ] && ok "runbook all-corrupt: the run reached step 12" || bad "rb2 did not finish"
exit $fail
