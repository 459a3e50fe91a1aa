#!/usr/bin/env python3
"""The BPE trainer against a plain, slow Python BPE trainer written here:
same pre-tokenization (the GPT-2 regex, on an ASCII corpus where Python's
`re` classes equal JavaScript's \\p{L}, \\p{N} and \\s), pair counts inside
words, the most frequent pair merged everywhere, ties to the smallest
(left id, right id). The merges must be identical, encoding the corpus with
the trained tokenizer must equal a plain merge-by-rank encoder, the token
count must fall as the vocabulary grows, and save/load must keep the ids.

usage: test_train_ref.py TOK_TOOL [--fortunes]
--fortunes: the first 600 kB of /usr/share/games/fortunes instead of the
synthetic corpus (slow: the reference takes about a minute)."""
import collections
import os
import random
import re
import subprocess
import sys
import tempfile

PAT = re.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+""",
                 re.ASCII)


def corpus(rng):
    words = ("the of and to in is you that it he was for on are as with his they I at "
             "be this have from or one had by word but not what all were we when your "
             "can said there use an each which she do how their if will up other about "
             "out many then them these so some her would make like him into time has "
             "look two more write go see number no way could people my than first water "
             "been call who oil its now find long down day did get come made may part "
             "antidisestablishmentarianism aaaa aaaaaa abab ababab").split()
    zipf = [1.0 / (i + 1) for i in range(len(words))]
    out = []
    for _ in range(6000):
        r = rng.random()
        if r < 0.05:
            out.append(rng.choice([" don't", " it's", " we've", " I'll", " they're", " I'm",
                                   " he'd", "'s"]))
        elif r < 0.10:
            out.append(" " + str(rng.randint(0, 99999)))
        elif r < 0.16:
            out.append(rng.choice([",", ".", "!", "?", ";", " --", " (", ")", ":", "..."]))
        elif r < 0.20:
            out.append(rng.choice(["\n", "\n\n", "   ", "\t", " \n", "  \n\n  "]))
        elif r < 0.45:
            syl = ["ka", "lo", "mi", "nu", "ter", "ing", "ex", "pro", "st", "qu", "zh", "ay"]
            w = "".join(rng.choice(syl) for _ in range(rng.randint(1, 4)))
            out.append(" " + w)
        else:
            w = rng.choices(words, zipf)[0]
            if rng.random() < 0.1:
                w = w.capitalize()
            out.append(" " + w)
    return "".join(out)


def ref_train(text, n_merges):
    counts = collections.Counter(PAT.findall(text))
    words = {tuple(w.encode()): c for w, c in counts.items()}
    merges = []
    next_id = 256
    while len(merges) < n_merges:
        pairs = collections.Counter()
        for w, c in words.items():
            for i in range(len(w) - 1):
                pairs[(w[i], w[i + 1])] += c
        if not pairs:
            break
        best = min(pairs.items(), key=lambda kv: (-kv[1], kv[0]))
        if best[1] < 2:
            break
        a, b = best[0]
        merges.append((a, b, next_id))
        nw = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(next_id)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            t = tuple(out)
            nw[t] = nw.get(t, 0) + c
        words = nw
        next_id += 1
    return merges


def ref_encode(text, merges):
    rank = {(a, b): (k, r) for k, (a, b, r) in enumerate(merges)}
    ids = []
    for w in PAT.findall(text):
        s = list(w.encode())
        while len(s) > 1:
            cands = [rank[(s[i], s[i + 1])] for i in range(len(s) - 1) if (s[i], s[i + 1]) in rank]
            if not cands:
                break
            k, r = min(cands)
            a, b, _ = merges[k]
            out, i = [], 0
            while i < len(s):
                if i + 1 < len(s) and s[i] == a and s[i + 1] == b:
                    out.append(r)
                    i += 2
                else:
                    out.append(s[i])
                    i += 1
            s = out
        ids.extend(s)
    return ids


def read_tok(path):
    with open(path) as f:
        lines = f.read().split("\n")
    assert lines[0] == "llmtrain-tokenizer 1", lines[0]
    head = dict(l.split(" ", 1) for l in lines[1:5])
    v = int(head["vocab_size"])
    i = 5 + v
    assert lines[i].startswith("merges "), lines[i]
    nm = int(lines[i].split()[1])
    merges = [tuple(int(x) for x in lines[i + 1 + k].split()) for k in range(nm)]
    return v, int(head["eot"]), [(a, b, r) for a, b, r, _ in merges]


def main():
    tool = sys.argv[1]
    rng = random.Random(7)
    text = corpus(rng)
    if "--fortunes" in sys.argv:
        root = "/usr/share/games/fortunes"
        if not os.path.isdir(root):
            print("SKIP: no %s" % root)
            return 77
        parts = []
        for name in sorted(os.listdir(root)):
            p = os.path.join(root, name)
            if not name.endswith((".dat", ".u8")) and os.path.isfile(p):
                with open(p, "rb") as f:
                    parts.append(f.read().decode("ascii", errors="ignore"))
        text = "".join(parts)[:600000]
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        cp = os.path.join(tmp, "corpus.txt")
        with open(cp, "w") as f:
            f.write(text)
        n_merges = 250
        tp = os.path.join(tmp, "t.tok")
        subprocess.run([tool, "train", cp, str(257 + n_merges), tp], check=True)
        v, eot, ours = read_tok(tp)
        ref = ref_train(text, n_merges)
        k = next((i for i in range(min(len(ours), len(ref))) if ours[i] != ref[i]),
                 min(len(ours), len(ref)))
        same = ours == ref
        print("corpus %d bytes; %d merges ours, %d reference; identical: %s"
              % (len(text), len(ours), len(ref), same))
        if not same:
            print("  first difference at merge %d: ours %s ref %s"
                  % (k, ours[k:k + 3], ref[k:k + 3]))
            fails += 1
        if v != 257 + len(ours) or eot != v - 1:
            print("  vocab_size %d / eot %d do not fit %d merges" % (v, eot, len(ours)))
            fails += 1
        # encoding with the saved file = merge-by-rank reference
        got = subprocess.run([tool, "encode", "file:" + tp, cp], capture_output=True,
                             check=True).stdout.decode().split()
        want = ref_encode(text, ref)
        if [int(x) for x in got] != want:
            print("  encoding differs from the reference encoder (%d vs %d ids)"
                  % (len(got), len(want)))
            fails += 1
        else:
            print("encode(corpus) equals the reference merge-by-rank encoder: %d ids"
                  % len(want))
        # compression improves with the vocabulary
        last = None
        for vs in (257, 300, 500, 1000, 2000):
            p = os.path.join(tmp, "v%d.tok" % vs)
            subprocess.run([tool, "train", cp, str(vs), p], check=True)
            n = len(subprocess.run([tool, "encode", "file:" + p, cp], capture_output=True,
                                   check=True).stdout.split())
            print("vocab %5d: %6d tokens, %.3f bytes/token" % (vs, n, len(text) / n))
            if vs == 257 and n != len(text.encode()):
                print("  no merges should give one token per byte")
                fails += 1
            if last is not None and not n < last:
                print("  not fewer tokens than with the smaller vocabulary")
                fails += 1
            last = n
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
