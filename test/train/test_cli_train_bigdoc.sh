#!/bin/sh
# llmtrain train on text whose first document is larger than the 64 MiB
# the job's BPE learns from (a text file without % lines is one document):
# the sample takes the document's first 64 MiB. Before, the sample was
# empty and the run stopped with "corpus ... is empty: no data to train
# on". One document leaves no validation split, which the run then says.
# usage: test_cli_train_bigdoc.sh path/to/llmtrain
exe=$(cd "$(dirname "$1")" && pwd)/$(basename "$1")
. "$(dirname "$0")/../run_lib.sh"

python3 - <<'PY' || exit 1
import random
r = random.Random(1)
words = open("corpus/" + __import__("os").listdir("corpus")[0]).read().split()[:2000]
with open("big.txt", "w") as f:
    n = 0
    while n < 65 * 2**20:
        s = " ".join(r.choice(words) for _ in range(16)) + "\n"
        f.write(s)
        n += len(s)
PY
cat > big.json <<JSON
{"name": "bigdoc",
 "model": {"arch": "gpt2", "layers": 1, "hidden": 32, "heads": 2, "vocab": 300, "seq_len": 16},
 "batch": {"micro": 2, "grad_accum": 1},
 "train": {"steps": 1, "seed": 5, "eval_interval": 1, "eval_batches": 1, "threads": 1},
 "data": {"train": "$tmp/big.txt", "tokenizer": {"kind": "bpe", "vocab_size": 280}},
 "hardware": {"gpu": "cpu"}}
JSON
"$exe" train big.json --out run > big.log 2>&1; rc=$?
! grep -q 'is empty' big.log && ok "a first document past the BPE sample: not taken for an empty corpus" ||
  { bad "big document (rc $rc)"; tail -3 big.log; }
[ $rc = 1 ] && grep -q "data.train $tmp/big.txt: the text gave one document" big.log &&
  [ -f run/data/tokenizer.bin ] && ls run/data/train/*.tok > /dev/null 2>&1 &&
  ok "BPE learned and the text prepared; no validation split said" ||
  { bad "big document prepared (rc $rc)"; tail -3 big.log; }
exit $fail
