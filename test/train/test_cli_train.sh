#!/bin/sh
# llmtrain train on a tiny model: metrics JSONL, validation, checkpoints,
# the SVG plot; --steps then --resume continues exactly like one
# uninterrupted run; bad specs and empty data fail with a clear message.
# usage: test_cli_train.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
# from a temporary directory holding corpus/ (any text does)
. "$(dirname "$0")/../run_lib.sh"

spec() { # $1 = file, then key=value overrides via sed on the template
  cat > "$1" <<JSON
{"name": "tiny",
 "model": {"arch": "gpt2", "layers": 2, "hidden": 64, "heads": HEADS,
           "vocab": VOCAB, "seq_len": 32},
 "batch": {"micro": 4, "grad_accum": 2},
 "optimizer": {"lr": 3e-3},
 "schedule": {"kind": "cosine", "warmup_steps": 2},
 "train": {"steps": 12, "seed": 5, "eval_interval": 6, "eval_batches": 2,
           "log_interval": 3, "threads": 2, "sample_tokens": 16},
 "data": {"train": "DATA", "tokenizer": {"kind": "bpe", "vocab_size": TOKV}},
 "checkpoint": {"dir": "ckpt", "interval": 4, "async": true},
 "hardware": {"gpu": "cpu"},
 "metrics": {"jsonl": "metrics.jsonl", "plot": "loss.svg"}}
JSON
}
mk() { # file heads vocab tokv data
  spec "$1"
  sed -i "s/HEADS/$2/; s/VOCAB/$3/; s/TOKV/$4/; s|DATA|$5|" "$1"
}
mk good.json 4 512 512 "$tmp/corpus"

"$exe" train good.json --out full > full.log 2>&1 && ok "full run" || { bad "full run"; cat full.log; }
[ "$(grep -c '"loss"' full/metrics.jsonl)" = 12 ] && ok "12 step lines" || bad "metrics lines"
grep -q '"step":12,"val_loss"' full/metrics.jsonl && ok "validation at the end" || bad "no final val_loss"
grep -q '"step":0,"val_loss"' full/metrics.jsonl && ok "validation at step 0" || bad "no val_loss at 0"
grep -q '^<svg' full/loss.svg && grep -q '<polyline' full/loss.svg && grep -q '</svg>' full/loss.svg \
  && ok "svg plot" || bad "svg plot"
grep -q 'validation loss .* vs unigram entropy' full.log && ok "entropy line" || bad "entropy line"
grep -q -- '---- sample' full.log && ok "sample" || bad "sample"
grep -q 'ETA' full.log && ok "progress line" || bad "progress line"
[ -f full/ckpt/latest ] || [ -d full/ckpt/latest ] || ls full/ckpt | grep -q 12 && ok "checkpoint" || bad "checkpoint"
ls full/ckpt | grep -q '12$' && ok "final checkpoint step 12" || bad "no step-12 checkpoint: $(ls full/ckpt)"

# interrupted at 6, resumed: the same numbers as the uninterrupted run
"$exe" train good.json --out part --steps 6 > part1.log 2>&1 && ok "first half" || { bad "first half"; cat part1.log; }
[ "$(grep -c '"loss"' part/metrics.jsonl)" = 6 ] && ok "6 step lines" || bad "first half lines"
"$exe" train good.json --out part --resume > part2.log 2>&1 && ok "resume" || { bad "resume"; cat part2.log; }
grep -q 'resumed from .* at step 6' part2.log && ok "resumed at 6" || bad "resume message"
# event lines ({"event":"start"|"resume",...}) mark where a run began
strip() { grep -v '"event"' "$1" | sed 's/,"step_s".*//'; }
if strip full/metrics.jsonl > a.txt && strip part/metrics.jsonl > b.txt && cmp -s a.txt b.txt; then
  ok "resumed run = uninterrupted run (loss, grad norm, lr, val loss)"
else
  bad "resumed run differs"; diff a.txt b.txt | head
fi

# a fresh run into a directory with checkpoints is refused (not overwritten)
"$exe" train good.json --out full > again.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q 'resume' again.log && ok "fresh run over old checkpoints refused" \
  || { bad "rerun into full/ (rc $rc)"; cat again.log; }
# --fresh over valid checkpoints: refused naming the newest step (12; it
# once named the oldest one kept, "newer than step -1") and what --fresh
# does; nothing moved
ls full/ckpt > fresh.before
"$exe" train good.json --out full --fresh > fresh.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q 'newest: step 12)' fresh.log && ! grep -q 'step -1' fresh.log &&
  grep -q 'starts from step 0 only when no checkpoint' fresh.log && grep -q 'nothing was moved' fresh.log &&
  ls full/ckpt | cmp -s - fresh.before && ok "--fresh over valid checkpoints names the newest (12), moves nothing" ||
  { bad "--fresh over valid checkpoints (rc $rc)"; cat fresh.log; }

# bad input: clear errors, exit 1
mk heads.json 5 512 512 "$tmp/corpus"
"$exe" train heads.json --out h > h.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q 'heads' h.log && ok "heads not dividing width: $(head -c 120 h.log)" || { bad "heads error (rc $rc)"; cat h.log; }
: > empty.txt
mk empty.json 4 512 512 "$tmp/empty.txt"
"$exe" train empty.json --out e > e.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q 'empty' e.log && ok "empty data: $(head -c 120 e.log)" || { bad "empty data (rc $rc)"; cat e.log; }
mk vocab.json 4 200 200 "$tmp/corpus"
"$exe" train vocab.json --out v > v.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q 'vocab' v.log && ok "vocab too small: $(head -c 160 v.log)" || { bad "vocab error (rc $rc)"; cat v.log; }
"$exe" train missing.json > m.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q 'missing.json' m.log && ok "missing spec" || { bad "missing spec (rc $rc)"; cat m.log; }
"$exe" train > u.log 2>&1; [ $? = 2 ] && ok "usage error" || bad "no usage error"

# model.vocab above the tokenizer's (byte: 257 tokens): the sample draws
# only ids the tokenizer decodes (one drawn above failed the sample, and
# the CLI printed none)
sed 's/"vocab": 512/"vocab": 320/; s/"kind": "bpe", "vocab_size": 512/"kind": "byte"/;
     s/"steps": 12/"steps": 2/; s/"interval": 4/"interval": 1/; s/"sample_tokens": 16/"sample_tokens": 200/' good.json > byte.json
"$exe" train byte.json --out by > by.log 2>&1 && grep -q 'vocab 257' by.log &&
  [ "$(awk '/^---- sample \(200 tokens/ {f = 1; next} /^----$/ {f = 0} f' by.log | wc -c)" -gt 1 ] &&
  ok "model.vocab 320, byte tokenizer: a sample of 200 tokens" || { bad "byte sample"; cat by.log; }

# resuming under another schedule (train.steps 12 -> 20) is allowed, and said
cp -r part part20 && sed 's/"steps": 12/"steps": 20/' good.json > steps20.json
"$exe" train steps20.json --out part20 --resume --steps 13 > p20.log 2>&1 && grep -q 'learning-rate schedule' p20.log \
  && ok "resume under another schedule warns" || { bad "schedule warning"; cat p20.log; }

# a checkpoint of before decay_fraction was set for WSD only (a job wrote
# 0 for every schedule; this one is cosine, which never reads it): the
# same schedule, so no warning
# (the manifests' digest dropped: they were written before digests too)
cp -r part old0 && sed -i 's/decay_fraction=0\.2[0-9]*/decay_fraction=0/; s/,"digest":"[0-9a-f]\{16\}"}$/}/' old0/ckpt/step-*/manifest.json
grep -q 'decay_fraction=0"' old0/ckpt/step-000000000012/manifest.json &&
  "$exe" train good.json --out old0 --resume > old0.log 2>&1 && grep -q "resumed from" old0.log &&
  ! grep -q 'learning-rate schedule' old0.log &&
  ok "decay_fraction 0 saved under cosine: the same schedule" ||
  { bad "old decay_fraction text"; grep -i "schedule\|error" old0.log | head -3; }

# --steps and --trace that the run would never reach are refused, naming
# the flag, instead of ending "ok" having done nothing (part/ is at 12)
cp -r part behind
"$exe" train good.json --out behind --resume --steps 5 > bh.log 2>&1; rc=$?
[ $rc = 2 ] && grep -q -- '--steps 5: the run resumed from .* at step 12' bh.log \
  && ok "--steps behind the checkpoint refused" \
  || { bad "--steps 5 after step 12 (rc $rc)"; cat bh.log; }
"$exe" train good.json --out tr1 --steps 2 --trace 5-8 > tr1.log 2>&1; rc=$?
[ $rc = 2 ] && grep -q -- '--trace 5-8: this run makes steps 1..2' tr1.log && [ ! -f tr1/trace-rank0.json ] \
  && ok "--trace beyond --steps refused" || { bad "--trace 5-8 with --steps 2 (rc $rc)"; cat tr1.log; }
"$exe" train good.json --out tr2 --steps 2 --trace 2-8 > tr2.log 2>&1 && [ -s tr2/trace-rank0.json ] \
  && ok "--trace overlapping the run traces its part" || { bad "--trace 2-8 with --steps 2"; cat tr2.log; }

# the checkpoint carries the model's config: llm.c export needs no --heads
"$exe" ckpt export full/ckpt --out model.bin --format llmc > ex.log 2>&1 \
  && [ "$(od -An -tu4 -N4 model.bin | tr -d ' ')" = 20240326 ] && ok "llm.c export from the run's checkpoint" \
  || { bad "llm.c export"; cat ex.log; }

# a data.train that does not exist is an error, never the default corpus
mk nodata.json 4 512 512 "$tmp/no-such-corpus"
"$exe" train nodata.json --out nd > nd.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q 'no-such-corpus does not exist' nd.log && ok "missing data.train named" \
  || { bad "missing data.train (rc $rc)"; cat nd.log; }

# the run prepared its text corpus once into full/data (train/val shards,
# tokenizer, report); training from those shards directly gives the same
# run (same tokens, same loader order)
[ -f full/data/report.json ] && [ -f full/data/tokenizer.bin ] && ls full/data/train/*.tok >/dev/null 2>&1 \
  && ls full/data/val/*.tok >/dev/null 2>&1 && ok "prepared data in the run directory" || bad "no full/data"
mk shards.json 4 512 512 "$tmp/full/data"
"$exe" train shards.json --out fromshards > fs.log 2>&1 && ok "train from prepared shards" || { bad "from shards"; cat fs.log; }
grep -q 'token shards' fs.log && ok "reported as token shards" || bad "shards banner"
if strip full/metrics.jsonl > a.txt && strip fromshards/metrics.jsonl > c.txt && cmp -s a.txt c.txt; then
  ok "shards run = text run (loss, grad norm, lr, val loss)"
else
  bad "shards run differs"; diff a.txt c.txt | head
fi
# shards without a val/ split need data.val
mkdir bare && cp full/data/train/*.tok bare/
mk bare.json 4 512 512 "$tmp/bare"
"$exe" train bare.json --out b > b.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q 'data.val' b.log && ok "bare shards need data.val" || { bad "bare shards (rc $rc)"; cat b.log; }
# a resume against other data is refused (the loader's fingerprint)
cp -r full other && rm -rf other/data && mkdir other/data && cp -r full/data/tokenizer.bin full/data/val other/data/ \
  && mkdir other/data/train && cp full/data/val/*.tok other/data/train/ && cp full/data/report.json other/data/
"$exe" train good.json --out other --resume > o.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q 'fingerprint\|samples per epoch' o.log && ok "resume on other data refused: $(grep -o 'loader:.*' o.log | head -c 100)" \
  || { bad "resume on other data (rc $rc)"; cat o.log; }
# train.device cuda: trains on a GPU where there is one; elsewhere the
# trainer refuses at creation, naming why, and no checkpoint is written
sed 's/"threads": 2,/"threads": 2, "device": "cuda",/; s/"gpu": "cpu"/"gpu": "H100-SXM"/' good.json > cuda.json
"$exe" train cuda.json --out cu > cu.log 2>&1; rc=$?
if grep -q 'on the GPU' cu.log && [ $rc = 0 ]; then
  ok "device cuda trained on the GPU"
elif [ $rc = 1 ] && grep -q 'trainer: device cuda' cu.log && [ ! -d cu/ckpt/latest ]; then
  ok "device cuda without a GPU refused: $(grep -o 'trainer: device cuda.*' cu.log | head -c 120)"
else
  bad "device cuda (rc $rc)"; cat cu.log
fi
# more validation batches than the split holds: each validation uses what
# it holds, and the run says so (not a silent cut)
mk evmany.json 4 512 512 "$tmp/full/data"
sed -i 's/"eval_batches": 2/"eval_batches": 100000/; s/"steps": 12/"steps": 2/; s/"interval": 4/"interval": 1/' evmany.json
"$exe" train evmany.json --out evmany > evmany.log 2>&1 &&
  grep -q 'train.eval_batches 100000: the validation data holds [0-9]* batches' evmany.log &&
  ok "eval_batches beyond the validation data: said" ||
  { bad "eval_batches beyond the validation data"; tail -5 evmany.log; }
# llm.c token files name no vocabulary: an id the tokenizer does not have
# (300 with the byte tokenizer's 257) is refused before any step, naming
# the file and the token (before: trained on, the model's vocab being 320)
mkdir -p llmc/train llmc/val
python3 - <<'PY'
import struct
for name, n, bad in (("llmc/train/a.bin", 4000, 3000), ("llmc/val/b.bin", 2000, -1)):
    toks = [(i * 7) % 256 for i in range(n)]
    if bad >= 0:
        toks[bad] = 300
    hdr = [20240520, 1, n] + [0] * 253
    open(name, "wb").write(struct.pack("<256i", *hdr) + struct.pack("<%dH" % n, *toks))
PY
sed "s|\"train\": \"[^\"]*\"|\"train\": \"$tmp/llmc/train\", \"val\": \"$tmp/llmc/val\"|;
     s/\"kind\": \"bpe\", \"vocab_size\": 512/\"kind\": \"byte\"/; s/\"steps\": 12/\"steps\": 2/; s/\"interval\": 4/\"interval\": 1/" good.json > llmc.json
"$exe" train llmc.json --out llmcrun > llmc.log 2>&1; rc=$?
[ $rc != 0 ] && grep -q 'llmc/train/a.bin: offset [0-9]*: token 3000 is id 300, outside the tokenizer.s vocabulary \[0, 257)' llmc.log &&
  ok "an llm.c file's id outside the tokenizer refused, naming file and token" ||
  { bad "llm.c id outside the vocabulary (rc $rc)"; tail -3 llmc.log; }
exit $fail
