#!/bin/sh
# Side by side on the same documents, same machine, one session: our GPT-2
# BPE encoder (bench_tok) against the reference Encoder.js (gpt-3-encoder,
# node) and js-tiktoken (node, installed with npm into a temporary folder
# when the registry is reachable). Prints MB/s and ratios (ours / peer, > 1:
# we are faster) and writes bench/results/tok-<date>.json.
# usage: bench/tok/compare_tok.sh [BUILD_DIR] [REPEATS]
# env: LLMT_GPT2_DIR (default ../shared/data/gpt2-tokenizer), NPM (npm)
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$top/build}" && pwd)
repeats=${2:-5}
gpt2=${LLMT_GPT2_DIR:-$top/../shared/data/gpt2-tokenizer}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
command -v node >/dev/null || { echo "compare_tok: no node" >&2; exit 77; }

# The corpus: one document per fortune, NUL-separated (the reference is
# quadratic in the length of one text, so both sides encode per document).
python3 - "$tmp/corpus.txt" <<'PY'
import os, sys
root = "/usr/share/games/fortunes"
docs = []
if os.path.isdir(root):
    for n in sorted(os.listdir(root)):
        p = os.path.join(root, n)
        if not n.endswith((".dat", ".u8")) and os.path.isfile(p) and not n.startswith("."):
            docs += open(p, "rb").read().split(b"\n%\n")
else:
    root = "/usr/share/common-licenses"
    for n in sorted(os.listdir(root)):
        p = os.path.join(root, n)
        if os.path.isfile(p):
            docs.append(open(p, "rb").read())
# node reads the file as UTF-8: keep only valid UTF-8 so both sides see the same bytes
out = []
for d in docs:
    try:
        d.decode("utf-8")
        out.append(d.replace(b"\0", b""))
    except UnicodeDecodeError:
        pass
open(sys.argv[1], "wb").write(b"\0".join(out))
PY
bytes=$(wc -c < "$tmp/corpus.txt")
echo "corpus: $bytes bytes"

tik=""
if (cd "$tmp" && ${NPM:-npm} install --silent --no-audit --no-fund js-tiktoken >/dev/null 2>&1); then
  echo "js-tiktoken $(node -p "require('$tmp/node_modules/js-tiktoken/package.json').version")"
  cat > "$tmp/tik.js" <<'JS'
const { getEncoding } = require(process.argv[2] + '/node_modules/js-tiktoken');
const fs = require('fs');
const e = getEncoding('gpt2');
const docs = fs.readFileSync(process.argv[3], 'utf8').split('\0');
for (let r = 0; r < 2; r++) {   // first: cold; second: warm (same process)
  const t0 = process.hrtime.bigint();
  let n = 0;
  for (const d of docs) n += e.encode(d, 'all').length;
  const t1 = process.hrtime.bigint();
  console.log(JSON.stringify({ pass: r, seconds: Number(t1 - t0) / 1e9, tokens: n }));
}
JS
  tik="$tmp/tik.txt"
else
  echo "js-tiktoken: npm install failed (no registry?), skipped"
fi
echo "reference Encoder.js, node $(node --version)"

# Rounds alternate ours / Encoder.js / js-tiktoken so that the machine's
# load drifts over all of them alike; medians over the rounds.
: > "$tmp/ref.txt"
i=0
while [ $i -lt "$repeats" ]; do
  echo "== round $((i + 1))/$repeats"
  LLMT_TOK_CORPUS=$tmp/corpus.txt LLMT_GPT2_DIR=$gpt2 nice "$build/bench/tok/bench_tok" \
    --filter gpt2-encode --repeats 3 --warmup 1 --json "$tmp/ours$i.json" | grep '^gpt2-encode'
  nice node "$top/test/tok/gpt2_ref.js" "$gpt2/Encoder.js" "$tmp/corpus.txt" --time >> "$tmp/ref.txt"
  [ -z "$tik" ] || nice node "$tmp/tik.js" "$tmp" "$tmp/corpus.txt" >> "$tik"
  i=$((i + 1))
done
python3 - "$tmp" "$repeats" > "$tmp/ours.json" <<'PY'
import json, sys
res = {}
for i in range(int(sys.argv[2])):
    for r in json.load(open("%s/ours%d.json" % (sys.argv[1], i)))["results"]:
        res.setdefault(r["name"], []).append(r["median_s"])
print(json.dumps({"results": [{"name": k, "median_s": sorted(v)[len(v) // 2]}
                              for k, v in res.items()]}))
PY

mkdir -p "$top/bench/results"
python3 - "$tmp/ours.json" "$tmp/ref.txt" "$bytes" "$top/bench/results/tok-$(date -u +%Y%m%d-%H%M%S).json" "$tik" <<'PY'
import json, statistics, sys
ours = {r["name"]: r for r in json.load(open(sys.argv[1]))["results"]}
ref = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
nbytes = int(sys.argv[3])
mbs = lambda s: nbytes / s / 1e6
cold = ours["gpt2-encode-cold"]["median_s"]
warm = ours["gpt2-encode-warm"]["median_s"]
ref_s = statistics.median(r["seconds"] for r in ref)
rows = {"bytes": nbytes,
        "ours_cold_MBps": mbs(cold), "ours_warm_MBps": mbs(warm),
        "encoder_js_MBps": mbs(ref_s),
        "ratio_cold_vs_encoder_js": ref_s / cold}
print("medians of %d rounds on %d bytes" % (len(ref), nbytes))
print("ours cold  %8.2f MB/s   ours warm %8.2f MB/s" % (mbs(cold), mbs(warm)))
print("Encoder.js %8.2f MB/s   (one pass per process, its cache cold)" % mbs(ref_s))
print("ratio ours(cold) / Encoder.js = %.1fx" % (ref_s / cold))
if sys.argv[5]:
    tk = [json.loads(l) for l in open(sys.argv[5]) if l.strip()]
    c = statistics.median(t["seconds"] for t in tk if t["pass"] == 0)
    w = statistics.median(t["seconds"] for t in tk if t["pass"] == 1)
    rows.update({"js_tiktoken_cold_MBps": mbs(c), "js_tiktoken_warm_MBps": mbs(w),
                 "ratio_cold_vs_js_tiktoken": c / cold, "ratio_warm_vs_js_tiktoken": w / warm})
    print("js-tiktoken %7.2f MB/s cold, %.2f MB/s second pass" % (mbs(c), mbs(w)))
    print("ratio ours / js-tiktoken = %.1fx cold, %.1fx warm" % (c / cold, w / warm))
json.dump(rows, open(sys.argv[4], "w"), indent=1)
print("written", sys.argv[4])
PY
