#!/bin/sh
# What a rank receives when the ranks restore from their parts held in
# memory (lib/ckpt/memtier.c), by layout: `llmtrain launch`, 4 Gloo
# workers on the CPU, NaN gradients on rank 2 at step 7 under the
# rollback policy (checkpoints every 2 steps), so every rank restores
# step 6 in place. Each rank's restore line in metrics.jsonl gives
# fetched_bytes (what it received, its own spans included) and
# parts_bytes (every rank's part together: what each rank received before
# the exchange was planned). Not timed: bytes only.
# usage: bench/ft/restore_bytes.sh path/to/llmtrain [HIDDEN [LAYERS]]
# Writes bench/results/ft-restore-bytes-STAMP.json and prints a table.
set -u
hidden=${2:-128}
layers=${3:-4}
. "$(dirname "$0")/setup.sh"
ft_setup "$1"
res=$top/bench/results/ft-restore-bytes-$(date -u +%Y%m%d-%H%M%S).json
echo "[" > "$res"
first=1
for lay in 'dp4-zero0 {"dp": 4, "zero": 0}' 'dp4-zero1 {"dp": 4, "zero": 1}' \
  'dp4-zero3 {"dp": 4, "zero": 3}' 'tp2-dp2-zero1 {"tp": 2, "dp": 2, "zero": 1}' \
  'pp2-dp2 {"pp": 2, "dp": 2}' 'tp2-pp2 {"tp": 2, "pp": 2}' 'pp4 {"pp": 4}'; do
  name=${lay%% *}
  par=${lay#* }
  cat > "$name.json" <<JSON
{"name": "restore-bytes",
 "model": {"arch": "gpt2", "layers": $layers, "hidden": $hidden, "heads": 4, "vocab": 320,
           "seq_len": 32},
 "batch": {"micro": 1, "global": 8},
 "optimizer": {"lr": 1e-3},
 "parallelism": $par,
 "train": {"steps": 10, "seed": 3, "eval_interval": 0, "log_interval": 1, "threads": 1,
           "sample_tokens": 0},
 "data": {"train": "$tmp/corpus", "tokenizer": {"kind": "byte"}},
 "checkpoint": {"interval": 2, "async": false},
 "fault_tolerance": {"collective_timeout_s": 20, "anomaly": {"policy": "rollback"}},
 "hardware": {"gpu": "cpu"}}
JSON
  LLMT_FAULT=nan:2:7 "$exe" launch --out "$name" --nproc 4 "$name.json" > "$name.log" 2>&1 ||
    { echo "bench: $name failed:"; tail -20 "$name.log"; exit 1; }
  [ $first = 1 ] || echo "," >> "$res"
  first=0
  python3 - "$name" "$par" "$name" >> "$res" <<'PY' || exit 1
import glob, json, sys
name, par, out = sys.argv[1:]
rows = []
for f in [f"{out}/metrics.jsonl"] + sorted(glob.glob(f"{out}/rank-*/metrics.jsonl")):
    for l in open(f):
        m = json.loads(l)
        if m.get("event") == "restore":
            rows.append(m)
if len(rows) != 4 or any("fetched_bytes" not in m for m in rows):
    sys.exit(f"bench: {name}: {len(rows)} restore lines with fetched_bytes, not 4")
got = [m["fetched_bytes"] for m in rows]
parts = rows[0]["parts_bytes"]
print(json.dumps({"layout": name, "parallelism": json.loads(par), "tier": rows[0]["tier"],
                  "fetched_bytes": got, "parts_bytes": parts,
                  "max_share": round(max(got) / parts, 4)}))
print(f"{name:14s} fetched {min(got)/1e6:6.2f}-{max(got)/1e6:6.2f} MB of {parts/1e6:6.2f} MB "
      f"({100*max(got)/parts:4.1f}%)", file=sys.stderr)
PY
done
echo "]" >> "$res"
echo "wrote $res"
