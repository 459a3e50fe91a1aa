#!/usr/bin/env python3
"""llmtrain data, every subcommand, on a corpus generated here whose report
counts are known exactly:

  corpus/a/doc1.txt    kept (the first of three copies)
  corpus/a/doc2.txt    exact duplicate of doc1          -> exact_dup
  corpus/a/doc3.txt    doc1 with one word changed       -> near_dup
  corpus/b/lines.txt   one line repeated                -> dup_lines
  corpus/b/ngram.txt   "buy now" over and over          -> top_ngram
  corpus/b/numbers.txt digits                           -> nonalpha
  corpus/b/short.txt   "Too short."                     -> too_short
  corpus/c/utf.txt     kept, one invalid byte (0xff)
  corpus/d.jsonl       2 kept, 1 line of bad JSON, 1 line without "text"

prepare with each tokenizer kind (bytes, bpe:N, our tokenizer file,
gpt2:DIR when the GPT-2 files are there), report.json and the printed table
against those numbers; llm.c files read back by the reader below (written
from llm.c's header layout, not from our code), decoded and compared with
the documents; the validation split against a pure-Python xxhash64; the
shard rollover rule; stats agreeing with the report, --verify catching a
flipped byte; a second prepare into the same directory refused with every
file untouched; a missing input naming itself; train-bpe; synth (its
entropy rate against the bigram statistics of its own output); the progress
bar on a pseudo-terminal.
usage: test_cli_data.py path/to/llmtrain"""
import hashlib
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

EXE = os.path.abspath(sys.argv[1])
SRC = os.environ.get("LLMT_SOURCE_ROOT",
                     os.path.join(os.path.dirname(__file__), "..", "..", ".."))
GPT2 = os.environ.get("LLMT_GPT2_DIR") or os.path.join(
    SRC, "..", "shared", "data", "gpt2-tokenizer")
failures = 0


def ok(cond, what, detail=""):
    global failures
    print(("ok   " if cond else "FAIL ") + what + ("" if cond else "  " + str(detail)))
    if not cond:
        failures += 1
    return cond


def run(*args, **kw):
    p = subprocess.run([EXE, "data"] + [str(a) for a in args],
                       capture_output=True, text=True, errors="replace", **kw)
    return p.returncode, p.stdout, p.stderr


# ---- an independent xxhash64 (the split rule of doc/data.md) ------------
M64 = (1 << 64) - 1
P1, P2, P3 = 0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9
P4, P5 = 0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M64


def xxh64(data, seed=0):
    def rnd(acc, v):
        return (rotl((acc + v * P2) & M64, 31) * P1) & M64

    def merge(acc, v):
        return ((acc ^ rnd(0, v)) * P1 + P4) & M64
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M64, (seed + P2) & M64, seed, (seed - P1) & M64]
        while i + 32 <= n:
            for k in range(4):
                v[k] = rnd(v[k], struct.unpack_from("<Q", data, i + 8 * k)[0])
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M64
        for k in range(4):
            h = merge(h, v[k])
    else:
        h = (seed + P5) & M64
    h = (h + n) & M64
    while i + 8 <= n:
        h ^= rnd(0, struct.unpack_from("<Q", data, i)[0])
        h = (rotl(h, 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h ^= (struct.unpack_from("<I", data, i)[0] * P1) & M64
        h = (rotl(h, 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h ^= (data[i] * P5) & M64
        h = (rotl(h, 11) * P1) & M64
        i += 1
    h ^= h >> 33
    h = (h * P2) & M64
    h ^= h >> 29
    h = (h * P3) & M64
    return h ^ (h >> 32)


# ---- llm.c's token file, read from its documented header ----------------
def read_llmc(path):
    with open(path, "rb") as f:
        head = f.read(256 * 4)
        if len(head) != 1024:
            raise ValueError("short header")
        magic, version, ntok = struct.unpack_from("<3i", head)
        if magic != 20240520 or version != 1:
            raise ValueError("magic %d version %d" % (magic, version))
        body = f.read()
    if len(body) != 2 * ntok:
        raise ValueError("%d token bytes for %d tokens" % (len(body), ntok))
    return list(struct.unpack("<%dH" % ntok, body))


def split_docs(ids, eot):
    """Documents of a token stream where eot starts every document."""
    docs = []
    for t in ids:
        if t == eot:
            docs.append([])
        else:
            docs[-1].append(t)
    return docs


def gpt2_decoder(dirname):
    enc = json.load(open(os.path.join(dirname, "encoder.json"), encoding="utf-8"))
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    byte_of = {chr(c): b for b, c in zip(bs, cs)}
    inv = {v: k for k, v in enc.items()}
    return lambda ids: bytes(byte_of[ch] for t in ids for ch in inv[t])


# ---- the corpus ----------------------------------------------------------
WORDS = ("river stone apple window garden silver morning candle forest "
         "mountain bridge letter orange yellow winter summer market village "
         "teacher student engine pencil basket castle dragon feather guitar "
         "harbor island jacket kettle ladder magnet needle ocean palace "
         "quartz rabbit saddle tunnel umbrella velvet walnut zipper anchor "
         "blanket cactus dolphin eagle falcon glacier hammer igloo jungle "
         "koala lantern meadow nectar orchid pepper quiver rocket spider "
         "tiger violin wagon yacht zebra amber breeze cobalt desert ember "
         "fossil granite horizon ivory jasper kernel lemon marble nimbus "
         "oyster pebble quill ripple sparrow thistle").split()


def prose(seed, nwords):
    r = random.Random(seed)
    words = [r.choice(WORDS) for _ in range(nwords)]
    lines = [" ".join(words[i:i + 12]) for i in range(0, nwords, 12)]
    return "\n".join(l.capitalize() + "." for l in lines)


def make_corpus(root):
    os.makedirs(os.path.join(root, "a"))
    os.makedirs(os.path.join(root, "b"))
    os.makedirs(os.path.join(root, "c"))
    doc1 = prose(1, 240)
    near = doc1.split(" ")
    near[100] = "completelydifferent"
    docs = {
        "a/doc1.txt": doc1.encode(),
        "a/doc2.txt": doc1.encode(),
        "a/doc3.txt": " ".join(near).encode(),
        "b/lines.txt": ("The same line comes back again.\n" * 10).encode(),
        "b/ngram.txt": ("buy now " * 60).strip().encode(),
        "b/numbers.txt": " ".join(str(1000 + 7 * i) for i in range(80)).encode(),
        "b/short.txt": b"Too short.",
        "c/utf.txt": prose(2, 90).encode()[:40] + b"\xff" + prose(2, 90).encode()[40:],
    }
    for name, body in docs.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(body)
    j1, j2 = prose(3, 70), prose(4, 70)
    with open(os.path.join(root, "d.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"text": j1, "id": 1}) + "\n")
        f.write('{"text": "broken\n')
        f.write(json.dumps({"text": j2, "id": 2}) + "\n")
        f.write(json.dumps({"body": "no text field here", "id": 3}) + "\n")
    utf = docs["c/utf.txt"].replace(b"\xff", "\ufffd".encode())
    kept = [doc1.encode(), utf, j1.encode(), j2.encode()]
    return kept


EXPECT = {"files": 9, "documents": 10, "invalid_utf8": 1, "bad_lines": 2,
          "kept": 4, "verdicts": {"keep": 4, "too_short": 1, "too_long": 0,
                                  "nonalpha": 1, "dup_lines": 1, "top_ngram": 1,
                                  "exact_dup": 1, "near_dup": 1}}


def check_report(rep, what, kept_bytes=None, expect=EXPECT):
    for k, v in expect.items():
        ok(rep.get(k) == v, "%s: report %s = %s" % (what, k, v), rep.get(k))
    ok(rep["train_documents"] + rep["val_documents"] == expect["kept"],
       what + ": train + val documents = kept")
    if kept_bytes is not None:
        ok(rep["train_tokens"] + rep["val_tokens"] == kept_bytes,
           what + ": byte tokens = sum of (1 + length) of the kept documents",
           (rep["train_tokens"], rep["val_tokens"], kept_bytes))


def stats_numbers(out):
    """{'train': {...}, 'val': {...}} from `data stats` of a prepared dir."""
    res, cur = {}, None
    for line in out.splitlines():
        if line.startswith(("train:", "val:", "shards:")):
            cur = res.setdefault(line.split(":")[0], {})
        elif cur is not None and line.startswith("  ") and not line.startswith("    "):
            parts = line.split()
            if parts and parts[-1].lstrip("-").replace(".", "").isdigit():
                cur[" ".join(parts[:-1])] = float(parts[-1])
        if line.startswith("report"):
            cur = None
    return res


def tree_state(d):
    st = {}
    for base, _, files in os.walk(d):
        for f in files:
            p = os.path.join(base, f)
            s = os.stat(p)
            st[p] = (s.st_mtime_ns, s.st_size,
                     hashlib.sha256(open(p, "rb").read()).hexdigest())
    return st


def main():
    tmp = tempfile.mkdtemp(prefix="llmt-data-cli-")
    os.chdir(tmp)
    try:
        kept = make_corpus("corpus")
        kept_bytes = sum(1 + len(k) for k in kept)

        # -- bytes tokenizer, our format --------------------------------
        rc, out, err = run("prepare", "corpus", "--out", "p1", "--val-frac", "0.5")
        ok(rc == 0, "prepare (bytes)", err)
        rep = json.load(open("p1/report.json"))
        check_report(rep, "bytes", kept_bytes)
        ok(rep["tokenizer"]["vocab_size"] == 257 and rep["tokenizer"]["eot"] == 256,
           "bytes: tokenizer 257 tokens, eot 256", rep["tokenizer"])
        ok(rep["options"]["val_fraction"] == 0.5 and rep["options"]["dedup"]["near"],
           "report.json records the options")
        ok(os.path.isfile("p1/tokenizer.bin"), "tokenizer.bin written")
        for label, val in (("documents read", 10), ("removed: exact_dup", 1),
                           ("removed: near_dup", 1), ("removed: too_short", 1),
                           ("documents kept", 4), ("bad JSONL lines", 2),
                           ("invalid UTF-8 replaced", 1)):
            line = [l for l in out.splitlines() if l.strip().startswith(label)]
            ok(line and line[0].split()[-1] == str(val),
               "table: %s %d" % (label, val), line)
        ok("ingest" in err and "d.jsonl" in err and "line 2" in err,
           "the bad JSONL line is logged with file and line", err)
        rc, sout, err = run("stats", "p1", "--verify")
        ok(rc == 0, "stats --verify", err)
        st = stats_numbers(sout)
        for split in ("train", "val"):
            s = st.get(split, {})
            ok(s.get("tokens") == rep[split + "_tokens"] and
               s.get("documents") == rep[split + "_documents"] and
               s.get("shards") == rep[split + "_shards"] and s.get("vocab") == 257,
               "stats %s agrees with the report" % split, (s, rep))
        ok("checksums" in sout and "uint16" in sout and "report" in sout,
           "stats prints dtype, checksums and the report summary")

        # a second prepare into p1: refused, nothing touched
        before = tree_state("p1")
        rc, out, err = run("prepare", "corpus", "--out", "p1")
        ok(rc == 1 and "p1" in err and "already" in err,
           "prepare into a prepared directory is refused", (rc, err))
        ok(tree_state("p1") == before, "... and leaves every file untouched")

        # missing input: non-zero, named, nothing created
        rc, out, err = run("prepare", "corpus", "nowhere/missing.txt", "--out", "p0")
        ok(rc != 0 and "nowhere/missing.txt" in err,
           "a missing input fails naming it", (rc, err))
        ok(not os.path.exists("p0/train"), "... and creates no shard directory")

        # -- llm.c files, the split rule and rollover ---------------------
        rc, out, err = run("prepare", "corpus", "--out", "p2", "--llmc",
                           "--val-frac", "0.5", "--seed", "99", "--shard-tokens", "700")
        ok(rc == 0, "prepare --llmc", err)
        rep2 = json.load(open("p2/report.json"))
        check_report(rep2, "llmc", kept_bytes)
        got = {"train": [], "val": []}
        for split in got:
            names = sorted(os.listdir("p2/" + split))
            ok(names and all(n.endswith(".bin") for n in names) and
               names == ["shard-%05d.bin" % i for i in range(len(names))],
               "llmc %s: shard-00000.bin ..." % split, names)
            ok(len(names) == rep2[split + "_shards"], "llmc %s shard count" % split)
            shards = []
            for n in names:
                try:
                    shards.append(split_docs(read_llmc(os.path.join("p2", split, n)), 256))
                except (ValueError, IndexError) as e:
                    ok(False, "llm.c reader: " + n, e)
            # rollover: a shard is closed before the document that would take
            # it past --shard-tokens (whole documents; one longer gets its own)
            for i, sh in enumerate(shards):
                size = sum(1 + len(d) for d in sh)
                ok(size <= 700 or len(sh) == 1, "llmc %s shard %d: %d tokens" % (split, i, size))
                if i + 1 < len(shards):
                    ok(size + 1 + len(shards[i + 1][0]) > 700,
                       "llmc %s shard %d full before rolling over" % (split, i))
            got[split] = [bytes(d) for sh in shards for d in sh]
        ok(sorted(got["train"] + got["val"]) == sorted(kept),
           "llm.c tokens decode to exactly the kept documents")
        want_val = sorted(k for k in kept if xxh64(k, 99) / 2.0 ** 64 < 0.5)
        ok(sorted(got["val"]) == want_val,
           "validation = documents with xxhash64(text, seed) / 2^64 < val-frac",
           (len(got["val"]), len(want_val)))
        ok(xxh64(b"") == 0xEF46DB3751D8E999, "(the Python xxhash64 itself)")
        rc, sout, err = run("stats", "p2/train")
        ok(rc == 0 and "(llm.c files)" in sout, "stats of llm.c shards", sout + err)

        # a flipped byte in a shard of ours: stats --verify fails
        shutil.copytree("p1", "p1bad")
        victim = os.path.join("p1bad/train", sorted(os.listdir("p1bad/train"))[0])
        with open(victim, "r+b") as f:
            f.seek(-5, 2)
            b = f.read(1)
            f.seek(-5, 2)
            f.write(bytes([b[0] ^ 0x55]))
        rc, sout, err = run("stats", "p1bad", "--verify")
        ok(rc == 1 and "p1bad" in err, "stats --verify names a corrupt shard", err)

        # -- options --------------------------------------------------------
        rc, out, err = run("prepare", "corpus", "--out", "p3", "--filter", "none",
                           "--dedup", "none")
        rep3 = json.load(open("p3/report.json")) if rc == 0 else {}
        ok(rc == 0 and rep3.get("kept") == 10 and rep3["options"]["filter"] is None
           and rep3["options"]["dedup"] is None, "--filter none --dedup none keeps all 10")
        rc, out, err = run("prepare", "corpus", "--out", "p4", "--dedup", "exact")
        rep4 = json.load(open("p4/report.json")) if rc == 0 else {"verdicts": {}}
        ok(rc == 0 and rep4["verdicts"].get("near_dup") == 0 and rep4.get("kept") == 5,
           "--dedup exact keeps the near duplicate", rep4.get("verdicts"))
        rc, out, err = run("prepare", "corpus", "--out", "p5", "--min-chars", "100000")
        ok(rc == 1 and "no document" in err and not os.path.exists("p5/train/shard-00000.tok"),
           "all documents filtered: fails, writes nothing", err)
        rc, out, err = run("prepare", "corpus", "--out", "p6", "--max-nonalpha", "0",
                           "--max-top-ngram", "0", "--max-dup-lines", "0", "--min-chars", "0")
        rep6 = json.load(open("p6/report.json")) if rc == 0 else {}
        ok(rc == 0 and rep6.get("kept") == 8, "thresholds of 0 turn filters off", rep6.get("verdicts"))
        rc, out, err = run("prepare", "corpus", "--out", "p7", "--val-frac", "2")
        ok(rc == 2 and "--val-frac" in err, "a bad value is a usage error", err)
        # a validation-only preparation (--val-frac 1) and a train-only one
        # (0): stats shows the empty split and exits 0 (it exited 1 with
        # "directory pv1/train has no *.tok or *.bin files")
        for frac, empty, say in (("1", "train", "validation only"), ("0", "val", "no validation split")):
            out_dir = "pv" + frac
            rc, out, err = run("prepare", "corpus", "--out", out_dir, "--val-frac", frac)
            rc2, sout, err2 = run("stats", out_dir, "--verify")
            ok(rc == 0 and rc2 == 0 and ("%s: %s/%s" % (empty, out_dir, empty)) in sout and
               say in sout and "checksums" in sout and "report (" in sout,
               "stats of a --val-frac %s preparation: %s/ empty, said, exit 0" % (frac, empty),
               (rc, rc2, err, err2, sout[:300]))
        rc, out, err = run("prepare", "corpus", "--out", "p7", "--shingle", "3",
                           "--permutations", "64", "--bands", "8", "--threshold", "0.7")
        rep7 = json.load(open("p7/report.json")) if rc == 0 else {"options": {"dedup": {}}}
        ok(rc == 0 and rep7["options"]["dedup"].get("bands") == 8 and
           rep7["options"]["dedup"].get("shingle") == 3 and rep7.get("kept") == 4,
           "MinHash options reach the library", rep7["options"]["dedup"])

        # -- tokenizers: bpe:N, its file, train-bpe, gpt2 ---------------------
        rc, out, err = run("prepare", "corpus", "--out", "b1", "--tokenizer", "bpe:400",
                           "--val-frac", "0.5")
        repb = json.load(open("b1/report.json")) if rc == 0 else {}
        ok(rc == 0, "prepare --tokenizer bpe:400", err)
        if rc == 0:
            check_report(repb, "bpe")
            ntok = repb["train_tokens"] + repb["val_tokens"]
            ok(repb["tokenizer"]["vocab_size"] <= 400 and ntok < kept_bytes / 2,
               "bpe: <= 400 tokens, compresses more than 2x", (repb["tokenizer"], ntok))
            rc, out, err = run("prepare", "corpus", "--out", "b2", "--tokenizer",
                               "b1/tokenizer.bin", "--val-frac", "0.5")
            repf = json.load(open("b2/report.json")) if rc == 0 else {}
            ok(rc == 0 and repf.get("train_tokens") == repb["train_tokens"] and
               repf.get("val_tokens") == repb["val_tokens"],
               "--tokenizer FILE (the saved BPE) gives the same tokens", err)
            # training on them with another data.tokenizer.kind is refused,
            # naming the key and the kind tokenizer.bin records (bpe)
            for kind, want in (("gpt2", 1), ("bpe", 0)):
                with open("k.json", "w") as f:
                    json.dump({"model": {"layers": 1, "hidden": 32, "heads": 2,
                                         "vocab": 512, "seq_len": 16},
                               "train": {"steps": 1, "sample_tokens": 0, "threads": 1},
                               "data": {"train": "b1", "tokenizer": {"kind": kind}},
                               "hardware": {"gpu": "cpu"}}, f)
                p = subprocess.run([EXE, "train", "k.json", "--out", "k-" + kind],
                                   capture_output=True, text=True, errors="replace")
                named = "data.tokenizer.kind: %s" % kind in p.stderr and "bpe" in p.stderr
                ok(p.returncode == want and named == bool(want),
                   "train on bpe shards with data.tokenizer.kind %s: %s" %
                   (kind, "refused by name" if want else "accepted"), (p.returncode, p.stderr))
        rc, out, err = run("train-bpe", "corpus", "--vocab", "300", "--out", "t.bin")
        comp = [l for l in out.splitlines() if l.startswith("compression")]
        ok(rc == 0 and os.path.isfile("t.bin") and comp and
           float(comp[0].split()[1]) > 1.2, "train-bpe prints compression > 1.2", out + err)
        rc, out, err = run("prepare", "corpus", "--out", "b3", "--tokenizer", "t.bin")
        ok(rc == 0, "prepare with the train-bpe file", err)
        rc, out, err = run("prepare", "corpus", "--out", "b4", "--tokenizer", "nope.bin")
        ok(rc == 1 and "nope.bin" in err, "a missing tokenizer file is named", err)
        if os.path.isfile(os.path.join(GPT2, "encoder.json")):
            rc, out, err = run("prepare", "corpus", "--out", "g1", "--llmc",
                               "--tokenizer", "gpt2:" + GPT2, "--val-frac", "0.5")
            ok(rc == 0, "prepare --tokenizer gpt2:DIR --llmc", err)
            if rc == 0:
                repg = json.load(open("g1/report.json"))
                check_report(repg, "gpt2")
                ok(repg["tokenizer"]["vocab_size"] == 50257 and
                   repg["tokenizer"]["eot"] == 50256, "gpt2: 50257 tokens, eot 50256")
                dec = gpt2_decoder(GPT2)
                docs = []
                for split in ("train", "val"):
                    for n in sorted(os.listdir("g1/" + split)):
                        docs += [dec(d) for d in split_docs(
                            read_llmc(os.path.join("g1", split, n)), 50256)]
                ok(sorted(docs) == sorted(kept),
                   "gpt2 ids decoded with encoder.json give the kept documents")
        else:
            print("skip gpt2: no encoder.json in " + GPT2)

        # -- synth --------------------------------------------------------------
        rc, out, err = run("synth", "--out", "s.txt", "--bytes", "200000",
                           "--alphabet", "8", "--branching", "2", "--seed", "3")
        ok(rc == 0 and os.path.getsize("s.txt") == 200000, "synth writes 200000 bytes", err)
        text = open("s.txt", "rb").read()
        ok(set(text) <= set(b"etaoinshrdlucmfwypvbgkqjxz "[:8]) | {32},
           "synth: letters of the first 8 of etaoin... and space", set(text))
        succ = {}
        for a, b in zip(text, text[1:]):
            succ.setdefault(a, {}).setdefault(b, 0)
            succ[a][b] += 1
        ok(all(len(s) <= 2 for s in succ.values()), "synth: branching 2")
        n = len(text) - 1
        hcond = -sum(c / n * math.log(c / sum(s.values()))
                     for s in succ.values() for c in s.values())
        rate = [l for l in out.splitlines() if l.startswith("entropy rate")]
        h = float(rate[0].split()[2]) if rate else -1
        ok(abs(h - hcond) < 0.01, "synth: entropy rate %.4f matches the bigram "
           "estimate %.4f of its text" % (h, hcond))
        rc, out2, err = run("synth", "--out", "s2.txt", "--bytes", "200000",
                            "--alphabet", "8", "--branching", "2", "--seed", "3")
        ok(open("s2.txt", "rb").read() == text, "synth is deterministic")
        rc, out, err = run("synth", "--out", "s3.txt", "--bytes", "100", "--alphabet", "3",
                           "--branching", "5")
        ok(rc == 2, "synth: branching > alphabet is a usage error")

        # -- the progress bar on a terminal -------------------------------------
        if shutil.which("script"):
            cmd = "%s data prepare corpus --out pt" % EXE
            p = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True,
                               text=True, errors="replace")
            ok(p.returncode == 0 and "MB/s" in p.stdout and "ETA" in p.stdout and
               "100.0%" in p.stdout, "progress bar on a terminal", p.stdout[-400:])
            rc, out, err = run("prepare", "corpus", "--out", "pn")
            ok("ETA" not in err, "no progress bar when stderr is not a terminal")
        else:
            print("skip progress bar: no script(1)")

        rc, out, err = run("frobnicate")
        ok(rc == 2, "unknown subcommand: usage error")
        # an option the subcommand does not read is refused by name (every
        # option is parsed for every subcommand: it used to be ignored)
        for flag, args in [("--out", ["stats", "p1", "--out", "x"]),
                           ("--tokenizer", ["stats", "p1", "--tokenizer", "bpe:300"]),
                           ("--vocab", ["synth", "--out", "s9.txt", "--bytes", "10",
                                        "--vocab", "300"]),
                           ("--llmc", ["train-bpe", "corpus", "--vocab", "300", "--out",
                                       "t9.bin", "--llmc"]),
                           ("--bpe-sample-mb", ["train-bpe", "corpus", "--vocab", "300",
                                                "--out", "t9.bin", "--bpe-sample-mb", "1"]),
                           ("--verify", ["prepare", "corpus", "--out", "q1", "--verify"]),
                           ("--bpe-sample-mb", ["prepare", "corpus", "--out", "q2",
                                                "--bpe-sample-mb", "2"]),
                           ("--shingle", ["prepare", "corpus", "--out", "q3", "--dedup",
                                          "exact", "--shingle", "3"]),
                           ("--threshold", ["prepare", "corpus", "--out", "q4", "--dedup",
                                            "none", "--threshold", "0.5"]),
                           ("extra", ["synth", "--out", "s9.txt", "--bytes", "10", "extra"]),
                           ("bpe:N", ["prepare", "corpus", "--out", "q5", "--tokenizer",
                                      "bpe:abc"])]:
            rc, out, err = run(*args)
            ok(rc == 2 and flag in err, "data %s: %s refused by name" % (args[0], flag),
               (rc, err))
        ok(not any(os.path.exists(p) for p in ("s9.txt", "t9.bin", "q1", "q2", "q3", "q4", "q5")),
           "a refused command wrote nothing")
        p = subprocess.run([EXE, "data", "--help"], capture_output=True, text=True)
        ok(p.returncode == 0 and "train-bpe" in p.stdout and "--shard-tokens" in p.stdout,
           "llmtrain data --help")
    finally:
        os.chdir("/")
        shutil.rmtree(tmp, ignore_errors=True)
    print("%d failure(s)" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
