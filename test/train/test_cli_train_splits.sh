#!/bin/sh
# llmtrain train on a preparation with one split empty (`data prepare
# --val-frac 1` writes only val/, --val-frac 0 only train/): refused naming
# the directory, the split it lacks and the fix (before: the dataset's
# "directory .../train has no *.tok or *.bin files"); data.val naming a
# prepared directory takes its val/ (before: "tokenizer.bin: bad magic"),
# text in data.val is refused by name, and one-document text in data.train
# says why it gives no validation split.
# usage: test_cli_train_splits.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/../run_lib.sh"

prep() { # out val-frac
  "$exe" data prepare corpus --out "$1" --val-frac "$2" --filter none --dedup none \
    > "$1.log" 2>&1 || { bad "prepare $1"; cat "$1.log"; }
}
prep allval 1
prep trainonly 0
prep both 0.3
[ -z "$(ls allval/train)" ] && [ -n "$(ls allval/val)" ] && [ -z "$(ls trainonly/val)" ] &&
  ok "preparations: allval has only val/, trainonly only train/" || bad "preparations' splits"

mk() { # file train [val]
  v=${3:+, \"val\": \"$3\"}
  cat > "$1" <<JSON
{"name": "splits",
 "model": {"arch": "gpt2", "layers": 1, "hidden": 32, "heads": 2, "vocab": 300, "seq_len": 16},
 "batch": {"micro": 2, "grad_accum": 1},
 "train": {"steps": 2, "seed": 5, "eval_interval": 1, "eval_batches": 1,
           "log_interval": 1, "threads": 1, "sample_tokens": 0},
 "data": {"train": "$2"$v},
 "hardware": {"gpu": "cpu"}}
JSON
}
run() { # name train [val]: exit status in rc, output in name.log
  mk "$1.json" "$2" "$3"
  "$exe" train "$1.json" --out "run-$1" > "$1.log" 2>&1
  rc=$?
}

run t-allval "$tmp/allval"
[ $rc = 1 ] && grep -q "data.train $tmp/allval: the preparation holds only a validation split" t-allval.log &&
  grep -q 'smaller --val-frac' t-allval.log && grep -q 'point data.train at training shards' t-allval.log &&
  ok "train on a validation-only preparation: refused naming it and the fix" ||
  { bad "train on allval (rc $rc)"; cat t-allval.log; }

run t-trainonly "$tmp/trainonly"
[ $rc = 1 ] && grep -q "data.train $tmp/trainonly: the preparation holds no validation split" t-trainonly.log &&
  grep -q 'val-frac above 0, or name validation shards in data.val' t-trainonly.log &&
  ok "train on a train-only preparation, no data.val: refused naming it and the fix" ||
  { bad "train on trainonly (rc $rc)"; cat t-trainonly.log; }

run v-trainonly "$tmp/both" "$tmp/trainonly"
[ $rc = 1 ] && grep -q "data.val $tmp/trainonly: the preparation holds no validation split" v-trainonly.log &&
  ok "data.val on a train-only preparation: refused naming data.val" ||
  { bad "data.val trainonly (rc $rc)"; cat v-trainonly.log; }

# the two together: trains, validating on allval's val/ (a prepared
# directory in data.val as in data.train)
run pair "$tmp/trainonly" "$tmp/allval"
[ $rc = 0 ] && grep -q '"step":2,"val_loss"' run-pair/metrics.jsonl &&
  ok "data.train train-only + data.val validation-only: trains and validates" ||
  { bad "trainonly + allval (rc $rc)"; cat pair.log; }
run pairval "$tmp/trainonly" "$tmp/allval/val"
[ $rc = 0 ] && ok "data.val naming the val/ directory itself" || { bad "allval/val (rc $rc)"; cat pairval.log; }

run v-text "$tmp/both" "$tmp/corpus"
[ $rc = 1 ] && grep -q "data.val $tmp/corpus is text or holds no token shards" v-text.log &&
  ok "text in data.val refused naming data.val" || { bad "text in data.val (rc $rc)"; cat v-text.log; }

# text of one document (a file without % lines), prepared by the job: the
# document goes to training and val/ stays empty; said as such (before:
# "validation data (data.val) .../val: ... no *.tok or *.bin files"), and
# with data.val given it trains
cat corpus/*.md > one.txt
run t-onedoc "$tmp/one.txt"
[ $rc = 1 ] && grep -q "data.train $tmp/one.txt: the text gave one document" t-onedoc.log &&
  grep -q 'split the text with % lines, or name validation shards in data.val' t-onedoc.log &&
  ok "one-document text without data.val: refused naming it and the fix" ||
  { bad "one-document text (rc $rc)"; cat t-onedoc.log; }
run onedoc-val "$tmp/one.txt" "$tmp/allval"
[ $rc = 0 ] && ok "one-document text with data.val trains" || { bad "one-document text + data.val (rc $rc)"; cat onedoc-val.log; }

# training data of fewer sequences than a step's global batch: trains, each
# step repeating sequences, and the run says so (it was silent)
mkdir small
for i in 1 2 3 4 5 6; do tail -c +$((i * 3000)) corpus/$(ls -S corpus | head -1) | head -c 300 > small/d$i.txt; done
"$exe" data prepare small --out smalltrain --val-frac 0 --filter none --dedup none > smalltrain.log 2>&1 ||
  { bad "prepare smalltrain"; cat smalltrain.log; }
mk few.json "$tmp/smalltrain" "$tmp/allval"
sed -i 's/"seq_len": 16/"seq_len": 1024/; s/"grad_accum": 1/"grad_accum": 2/' few.json
"$exe" train few.json --out run-few > few.log 2>&1; rc=$?
[ $rc = 0 ] && grep -q "data.train $tmp/smalltrain/train holds 1 sequence(s) of model.seq_len 1024 tokens, fewer than a step's global batch of 4: every step repeats sequences" few.log &&
  ok "fewer training sequences than a batch: said" || { bad "few sequences (rc $rc)"; cat few.log; }

# a glob in data.train matching nothing: named as such (it was "no
# tokenizer for these shards", the tokenizer being looked for first)
run noglob "$tmp/nowhere/*.tok" "$tmp/allval"
[ $rc = 1 ] && grep -q "data.train) $tmp/nowhere/\*.tok: .*matches no shard file" noglob.log &&
  ! grep -q 'no tokenizer' noglob.log && ok "a data.train glob matching nothing: said" ||
  { bad "glob matching nothing (rc $rc)"; cat noglob.log; }

# validation shards each shorter than a window: the loader's reason, named
# under data.val (it was "the validation data holds fewer than 2
# sequences" of a split holding six documents of 300 tokens)
"$exe" data prepare small --out smallval --val-frac 1 --shard-tokens 400 --filter none \
  --dedup none > smallval.log 2>&1 || { bad "prepare smallval"; cat smallval.log; }
mk shortval.json "$tmp/trainonly" "$tmp/smallval"
sed -i 's/"seq_len": 16/"seq_len": 512/' shortval.json
"$exe" train shortval.json --out run-shortval > shortval.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q "validation data (data.val) $tmp/smallval/val: loader: no shard of the dataset .* holds a whole window of seq_len + 1 = 513 tokens" shortval.log &&
  ok "validation shards shorter than a window: the reason, under data.val" ||
  { bad "short validation shards (rc $rc)"; cat shortval.log; }

# fewer validation sequences than one batch.micro: how many, where they
# came from and what would help (it was "data.val: ... holds fewer than N
# sequences", naming data.val when the spec gave none)
mk fewval.json "$tmp/trainonly" "$tmp/smallval"
sed -i 's/"micro": 2/"micro": 4096/' fewval.json
"$exe" train fewval.json --out run-fewval > fewval.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q "data.val: the validation data holds [0-9]* sequences of model.seq_len 16 tokens, fewer than one batch of batch.micro 4096: give more validation data (more text or shards in data.val), or lower batch.micro or model.seq_len" fewval.log &&
  ok "fewer validation sequences than a batch: counted, named, the fix given" ||
  { bad "fewer validation sequences than a batch (rc $rc)"; cat fewval.log; }

# a resumed run reuses the text it prepared into RUN/data: data.train
# naming other text is refused, naming both (it trained on the old text
# and said it was the new one)
mkdir small2 && cp small/* small2/ && echo "one more document of its own" > small2/extra.txt
mk textA.json "$tmp/small"
mk textB.json "$tmp/small2"
"$exe" train textA.json --out run-text --steps 1 > textA.log 2>&1 || { bad "text run"; cat textA.log; }
"$exe" train textB.json --out run-text --resume > textB.log 2>&1; rc=$?
[ $rc = 1 ] && grep -q "data.train is $tmp/small2, but run-text/data was prepared from $tmp/small by the earlier start" textB.log &&
  ok "resume with data.train naming other text: refused naming both" ||
  { bad "resume with other text (rc $rc)"; cat textB.log; }
"$exe" train textA.json --out run-text --resume > textA2.log 2>&1 &&
  ok "resume with the same text continues" || { bad "resume same text"; cat textA2.log; }
exit $fail
