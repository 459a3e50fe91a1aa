"""The data pipeline through the ctypes bindings, as a host that embeds only
llmtrain's data loader would use it.

Writes a small corpus (two '%'-separated text files, one of them CRLF with
an invalid UTF-8 byte, and a JSONL file with bad lines), prepares it from
Python with the byte tokenizer and with a BPE tokenizer trained from
Python, and checks the report against counts derived here. Every train and
validation shard is parsed by an independent reader written from
doc/formats/token-shard.md and compared with llmt_dataset_read; the
documents are decoded back and must be exactly the corpus' kept documents.
The loader's batches must be the windows its sample_ids name, the same
whatever the dp layout, and a state saved by 2 ranks and restored into 1
rank (micro_batch doubled) must finish the epoch with no sample repeated or
skipped. When a C compiler is around, the ctypes struct layouts are
compared with include/llmtrain.h (sizeof and offsetof of every field).

usage: data_test.py [PATH/TO/libllmtrain.so]  (else $LLMT_LIB)
exit 0 pass, 1 fail, 77 skip (the library cannot be loaded)."""
import array
import collections
import glob
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llmtrain as L  # noqa: E402

failures = 0


def check(cond, what):
    global failures
    if not cond:
        failures += 1
        print("FAIL " + what)
    return cond


def ok(what):
    print("ok   " + what)


# ---------------------------------------------------------------- the corpus

def make_corpus(root):
    """Write the corpus; return (documents as ingest must yield them in
    order, expected verdict counts, bad JSONL lines, invalid UTF-8)."""
    rng = random.Random(20261124)
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9)))
             for _ in range(400)]

    def text(nwords):
        words = [rng.choice(vocab) for _ in range(nwords)]
        words[0] = words[0].capitalize()
        lines, line = [], []
        for w in words:
            line.append(w)
            if len(line) == 9:
                lines.append(" ".join(line))
                line = []
        if line:
            lines.append(" ".join(line))
        return "\n".join(lines) + ".\n"

    docs = []  # what ingest yields, in order (directory walk: by name)
    verdicts = collections.Counter()

    # docs.jsonl: one object a line, two bad lines and a blank one.
    jdocs = [text(rng.randint(20, 40)).rstrip("\n") for _ in range(12)]
    jdocs[3] = "Caf\u00e9 cr\u00e8me " + jdocs[3]  # non-ASCII text
    lines = [json.dumps({"text": d, "id": i}) for i, d in enumerate(jdocs)]
    lines.insert(5, '{"text": "unterminated')
    lines.insert(8, '{"title": "no text field here"}')
    lines.insert(10, "")
    with open(os.path.join(root, "docs.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    docs += jdocs
    verdicts["keep"] += len(jdocs)

    # fortunes.txt: '%' separated; a too-short one, an exact and a near copy.
    fdocs = [text(rng.randint(20, 45)) for _ in range(30)]
    raw = []
    for i, d in enumerate(fdocs):
        raw.append(d)
        docs.append(d)
        verdicts["keep"] += 1
        if i == 4:
            raw.append("Tiny saying.\n")
            docs.append("Tiny saying.\n")
            verdicts["too_short"] += 1
        if i == 7:
            raw.append(fdocs[0])
            docs.append(fdocs[0])
            verdicts["exact_dup"] += 1
        if i == 9:
            near = fdocs[2][:-2] + " " + vocab[0] + ".\n"
            raw.append(near)
            docs.append(near)
            verdicts["near_dup"] += 1
    with open(os.path.join(root, "fortunes.txt"), "w") as f:
        f.write("".join(d + "%\n" for d in raw))

    # more/sayings.txt: CRLF line endings, one invalid byte (-> U+FFFD).
    os.mkdir(os.path.join(root, "more"))
    sdocs = [text(rng.randint(20, 40)) for _ in range(10)]
    sdocs[6] = "Broken \xff byte " + sdocs[6]
    with open(os.path.join(root, "more", "sayings.txt"), "wb") as f:
        for d in sdocs:
            f.write((d + "%\n").replace("\n", "\r\n").encode("latin-1"
                    if "\xff" in d else "utf-8"))
    sdocs[6] = sdocs[6].replace("\xff", "\ufffd")
    docs += sdocs
    verdicts["keep"] += len(sdocs)
    return docs, verdicts, 2, 1


# ---------------------------------------------------- an independent reader

HEADER = struct.Struct("<8sIIIiQQQQQQQQ32sQ")  # doc/formats/token-shard.md


def read_shard(path):
    """(vocab_size, tokens, document index) of one of our shards, every
    header rule of the format checked here."""
    with open(path, "rb") as f:
        data = f.read()
    where = os.path.basename(path)
    check(len(data) >= 128, f"{where}: at least 128 bytes")
    (magic, version, header_size, dtype, vocab, n_tok, n_docs, tok_off, tok_bytes,
     idx_off, idx_bytes, _tok_hash, _idx_hash, reserved, _hdr_hash) = HEADER.unpack_from(data)
    check(HEADER.size == 128, "header struct is 128 bytes")
    check(magic == b"LLMTTOK\0", f"{where}: magic {magic!r}")
    check(version == 1 and header_size == 128, f"{where}: version {version} header {header_size}")
    check(dtype == (2 if vocab <= 65536 else 4), f"{where}: dtype {dtype} for vocab {vocab}")
    check(tok_off == 128 and tok_bytes == n_tok * dtype, f"{where}: token range")
    check(idx_off == (128 + tok_bytes + 7) // 8 * 8, f"{where}: index offset")
    check(idx_bytes == n_docs * 8 and idx_off + idx_bytes == len(data), f"{where}: index size")
    check(reserved == bytes(32), f"{where}: reserved bytes are zero")
    check(data[128 + tok_bytes:idx_off] == bytes(idx_off - 128 - tok_bytes), f"{where}: padding")
    tokens = array.array("H" if dtype == 2 else "I", data[128:128 + tok_bytes])
    index = array.array("Q", data[idx_off:idx_off + idx_bytes])
    if sys.byteorder == "big":
        tokens.byteswap()
        index.byteswap()
    check(len(index) == 0 or index[0] == 0, f"{where}: index starts at 0")
    check(all(index[i] <= index[i + 1] for i in range(len(index) - 1))
          and all(x <= n_tok for x in index), f"{where}: index ascending, inside")
    return vocab, list(tokens), list(index)


def split_docs(tokens, index):
    ends = list(index[1:]) + [len(tokens)]
    return [tokens[a:b] for a, b in zip(index, ends)]


# ---------------------------------------------------------------- the checks

def check_layouts(lib):
    """sizeof/offsetof of the ctypes structs against the header, with a C
    compiler when there is one; the defaults of each _opts_init land in the
    fields they should either way."""
    po = L.prepare_opts(lib)
    lo = L.loader_opts(lib)
    do = L.dedup_opts(lib)
    fo = L.filter_opts(lib)
    io = L.ingest_opts(lib)
    check((po.shard_tokens, po.val_fraction, po.seed, po.no_filter, po.llmc_format)
          == (1 << 26, 0.01, 1337, 0, 0) and not po.progress and not po.ingest,
          f"prepare opts defaults {po}")
    check((lo.seq_len, lo.micro_batch, lo.grad_accum, lo.dp_size, lo.shuffle, lo.prefetch,
           lo.seed) == (1024, 4, 1, 1, 1, 4, 1337), f"loader opts defaults {lo}")
    check((do.exact, do.near, do.shingle, do.permutations, do.bands, do.threshold, do.seed)
          == (1, 1, 5, 128, 16, 0.8, 42), f"dedup opts defaults {do}")
    check((fo.min_chars, fo.max_chars, fo.max_nonalpha_frac, fo.max_dup_line_frac,
           fo.max_top_ngram_frac, fo.ngram_min_words) == (16, 0, 0.5, 0.3, 0.2, 50),
          f"filter opts defaults {fo}")
    check(io.text_field == b"text" and io.doc_separator is None, f"ingest opts defaults {io}")
    ok("opts_init defaults land in the expected fields")

    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    src = os.environ.get("LLMT_SOURCE_ROOT",
                         os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    header = os.path.join(src, "include", "llmtrain.h")
    if not cc or not os.path.exists(header):
        print("skip struct layout vs llmtrain.h (no C compiler or header)")
        return
    structs = {L.IngestOpts: "llmt_ingest_opts", L.FilterOpts: "llmt_data_filter_opts",
               L.DedupOpts: "llmt_dedup_opts", L.PrepareOpts: "llmt_data_prepare_opts",
               L.DataReport: "llmt_data_report", L.DatasetInfo: "llmt_dataset_info",
               L.LoaderOpts: "llmt_loader_opts", L.LoaderState: "llmt_loader_state",
               L.Tensor: "llmt_tensor", L.ContextOpts: "llmt_context_opts"}
    code = ["#include <stdio.h>", "#include <stddef.h>", '#include "llmtrain.h"',
            "int main(void) {"]
    want = []
    for cls, cname in structs.items():
        code.append(f'printf("%zu\\n", sizeof({cname}));')
        want.append((f"sizeof {cname}", ctypes_sizeof(cls)))
        for f in cls._fields_:
            code.append(f'printf("%zu\\n", offsetof({cname}, {f[0]}));')
            want.append((f"{cname}.{f[0]}", getattr(cls, f[0]).offset))
    code.append("return 0; }")
    with tempfile.TemporaryDirectory() as d:
        c = os.path.join(d, "layout.c")
        with open(c, "w") as f:
            f.write("\n".join(code))
        exe = os.path.join(d, "layout")
        r = subprocess.run([cc, "-std=c99", "-I", os.path.dirname(header), c, "-o", exe],
                           capture_output=True, text=True)
        if not check(r.returncode == 0, f"compile layout probe: {r.stderr[-2000:]}"):
            return
        got = [int(x) for x in subprocess.run([exe], capture_output=True, text=True,
                                              check=True).stdout.split()]
    bad = [f"{name}: C {g} ctypes {w}" for (name, w), g in zip(want, got) if g != w]
    check(not bad and len(got) == len(want), "struct layouts: " + "; ".join(bad))
    ok(f"{len(structs)} struct layouts match llmtrain.h ({len(want)} sizes and offsets)")


def ctypes_sizeof(cls):
    import ctypes
    return ctypes.sizeof(cls)


def check_tokenizer(tok, name, samples):
    for s in samples:
        ids = tok.encode(s)
        check(tok.decode(ids) == s, f"{name}: decode(encode(x)) == x for {s[:20]!r}")
        check(all(0 <= i < tok.vocab_size and i != tok.eot for i in ids),
              f"{name}: ids in range, no <|endoftext|> from text")
    check(tok.decode([tok.eot]) == b"<|endoftext|>", f"{name}: eot decodes to its text")
    try:
        tok.decode([1, tok.vocab_size])
        check(False, f"{name}: an id outside the vocabulary raises")
    except L.Error as e:
        check(e.status == L.ERR_INVALID_ARGUMENT and e.detail and e.detail in str(e)
              and str(e).startswith("invalid argument"),
              f"{name}: bad id raises invalid argument with the handle's error: {e}")


def check_long_token(lib, ctx):
    """token_bytes of a token longer than its first buffer (256 bytes):
    the retry's bytes, and no BUFFER_TOO_SMALL of the first try left as
    the thread's last error (it was: a failure that did not happen)."""
    with L.Tokenizer.train_bpe(ctx, "a" * 4096 + "\n", 300) as tok:
        lens = [len(tok.token_bytes(i)) for i in range(tok.vocab_size)]
        big = lens.index(max(lens))
        c = lib._lib
        c.llmt_last_error.restype = L.ctypes.c_char_p
        c.llmt_last_error_clear()
        b = tok.token_bytes(big)
        st, msg = c.llmt_last_error_status(), c.llmt_last_error().decode()
        if (check(len(b) > 256 and b == b"a" * len(b), f"token_bytes: a {len(b)}-byte token") and
                check(st == 0, f"token_bytes' retry leaves no last error (got {st}: {msg})")):
            ok(f"token_bytes of a {len(b)}-byte token: no last error left")


def check_prepared(lib, ctx, out, tok, kept, name):
    """Both splits through the independent reader and llmt_dataset_read;
    the decoded documents must be exactly `kept`. Returns the train shards'
    token lists."""
    eot = tok.eot
    found = collections.Counter()
    train_tokens = None
    for split in ("train", "val"):
        files = sorted(glob.glob(os.path.join(out, split, "*.tok")))
        ref = [read_shard(p) for p in files]
        with L.Dataset(ctx, os.path.join(out, split), verify=True) as ds:
            info = ds.info()
            check(info.shards == len(files), f"{name}/{split}: {info.shards} shards")
            check(info.tokens == sum(len(t) for _, t, _ in ref)
                  and info.documents == sum(len(i) for _, _, i in ref)
                  and info.vocab_size == tok.vocab_size,
                  f"{name}/{split}: dataset info {info}")
            for i, (path, (vocab, tokens, index)) in enumerate(zip(files, ref)):
                sh = ds.shard(i)
                check(os.path.realpath(sh.path) == os.path.realpath(path)
                      and sh.tokens == len(tokens) and sh.documents == len(index),
                      f"{name}/{split}: shard {i} {sh}")
                check(vocab == tok.vocab_size, f"{name}/{split}: shard {i} vocab {vocab}")
                check(ds.read(i).tolist() == tokens,
                      f"{name}/{split}: llmt_dataset_read of shard {i} == the file's tokens")
                a, n = len(tokens) // 3, len(tokens) // 4
                check(ds.read(i, a, n).tolist() == tokens[a:a + n],
                      f"{name}/{split}: read of a slice of shard {i}")
                for d in split_docs(tokens, index):
                    check(d[0] == eot and eot not in d[1:],
                          f"{name}/{split}: a document starts with <|endoftext|>, once")
                    found[tok.decode(d[1:]).decode()] += 1
            try:
                ds.read(0, len(ref[0][1]) - 2, 5)
                check(False, f"{name}/{split}: a read past the shard raises")
            except L.Error as e:
                check(e.status != 0 and e.detail, f"{name}/{split}: read past the end: {e}")
        if split == "train":
            train_tokens = [t for _, t, _ in ref]
    check(found == collections.Counter(kept),
          f"{name}: decoded documents == the kept documents "
          f"(missing {list((collections.Counter(kept) - found).keys())[:2]}, "
          f"extra {list((found - collections.Counter(kept)).keys())[:2]})")
    ok(f"{name}: {sum(found.values())} documents decoded back from both splits, "
       "shards equal to the independent reader")
    return train_tokens


def check_loader(lib, ctx, out, shards_tokens):
    T = 16
    windows = []  # sample id -> (shard, window tokens), file order
    for s, toks in enumerate(shards_tokens):
        for k in range((len(toks) - 1) // T):
            windows.append((s, toks[k * T:k * T + T + 1]))
    N = len(windows)

    def rows_match(batch, mb, what):
        good = True
        for i, sid in enumerate(batch.sample_ids):
            w = windows[sid][1]
            good &= batch.inputs[i * T:(i + 1) * T].tolist() == w[:T]
            good &= batch.targets[i * T:(i + 1) * T].tolist() == w[1:]
        return check(good, f"{what}: rows are the windows named by sample_ids")

    with L.Dataset(ctx, os.path.join(out, "train")) as ds:
        common = dict(seq_len=T, seed=99)
        # one rank, micro-batch 4: more than an epoch
        with ds.loader(micro_batch=4, **common) as one:
            check(one.samples_per_epoch == N, f"samples per epoch {one.samples_per_epoch} == {N}")
            stream = []
            for _ in range(2 * N // 4 + 2):
                b = one.next()
                rows_match(b, 4, "dp 1")
                stream += b.sample_ids.tolist()
        check(sorted(stream[:N]) == list(range(N)), "epoch 0 is a permutation of the windows")
        check(sorted(stream[N:2 * N]) == list(range(N)), "epoch 1 is a permutation too")
        check(stream[:N] != list(range(N)) and stream[:N] != stream[N:2 * N],
              "shuffled, and differently in epoch 1")
        ok(f"dp 1: {len(stream)} samples, batches == the windows of sample_ids ({N} an epoch)")

        # prefetch 0 reads the same batches
        with ds.loader(micro_batch=4, prefetch=0, **common) as nopf:
            same = sum((nopf.next().sample_ids.tolist() for _ in range(5)), [])
        check(same == stream[:20], "prefetch 0 gives the same samples")

        # two ranks, micro-batch 2: each step is the same 4 samples
        G = 4
        steps = N // G // 2
        ranks = [ds.loader(micro_batch=2, dp_rank=r, dp_size=2, **common) for r in range(2)]
        got = []
        for s in range(steps):
            for r, ld in enumerate(ranks):
                b = ld.next()
                rows_match(b, 2, f"dp 2 rank {r}")
                got += b.sample_ids.tolist()
        check(got == stream[:steps * G], "dp 2 x micro-batch 2 reads dp 1 x 4's samples, step by step")
        states = [ld.get_state() for ld in ranks]
        check(states[0].as_dict() == states[1].as_dict(), "both ranks save the same state")
        st = states[0]
        check((st.epoch, st.cursor, st.samples_per_epoch, st.seed)
              == (0, steps * G, N, 99) and st.fingerprint == ds.info().fingerprint,
              f"state {st}")
        saved = json.dumps(st.as_dict())  # as a checkpoint would keep it
        for ld in ranks:
            ld.close()

        # resume on one rank with micro-batch 4, to the end of the epoch
        with ds.loader(micro_batch=4, **common) as resumed:
            resumed.set_state(json.loads(saved))
            rest = []
            while steps * G + len(rest) < N:
                b = resumed.next()
                rows_match(b, 4, "resumed")
                rest += b.sample_ids.tolist()
        epoch0 = got + rest[:N - steps * G]
        check(len(epoch0) == N and sorted(epoch0) == list(range(N)),
              f"2 ranks -> 1 rank: epoch 0 has every sample once ({len(set(epoch0))}/{N})")
        check(rest == stream[steps * G:steps * G + len(rest)], "resumed stream == uninterrupted one")
        ok(f"state saved after {steps} steps on 2 ranks, resumed on 1 rank (micro-batch 4): "
           f"{N - steps * G} more samples, none repeated or skipped")

        # assign_shards: the shards each rank reads in epoch 0 (a small and a
        # large micro-batch: with 100 rows a rank misses some shards)
        for mb in (2, 100):
            G = 2 * mb
            ranks = [ds.loader(micro_batch=mb, dp_rank=r, dp_size=2, **common)
                     for r in range(2)]
            read = [set(), set()]
            for s in range(N // G + 1):
                for r, ld in enumerate(ranks):
                    b = ld.next()
                    rows_match(b, mb, f"dp 2 x {mb}")
                    for i, sid in enumerate(b.sample_ids):
                        if s * G + r * mb + i < N:
                            read[r].add(windows[sid][0])
            for r in range(2):
                check(ranks[r].assign_shards(r, 0) == sorted(read[r]),
                      f"assign_shards(rank {r}, epoch 0) {ranks[r].assign_shards(r, 0)} "
                      f"== shards read {sorted(read[r])}")
            ok(f"assign_shards (micro-batch {mb}): rank 0 {sorted(read[0])}, "
               f"rank 1 {sorted(read[1])}")
            for ld in ranks:
                ld.close()

        # errors: mid-step state, another seq_len, a bad dp_rank
        with ds.loader(micro_batch=2, grad_accum=2, **common) as ga:
            ga.next()
            try:
                ga.get_state()
                check(False, "get_state inside a step raises")
            except L.Error as e:
                check(e.status == L.ERR_STATE and e.detail and
                      str(e).startswith(lib.status_string(L.ERR_STATE)),
                      f"get_state inside a step: {e}")
        with ds.loader(seq_len=8, micro_batch=2) as other:
            try:
                other.set_state(json.loads(saved))
                check(False, "a state of another seq_len raises")
            except L.Error as e:
                check(e.status == L.ERR_INVALID_ARGUMENT and e.detail,
                      f"state of another seq_len: {e}")
        try:
            ds.loader(dp_rank=2, dp_size=2)
            check(False, "dp_rank outside dp_size raises")
        except L.Error as e:
            check(e.status == L.ERR_INVALID_ARGUMENT and "dp_rank" in e.detail,
                  f"bad dp_rank names it (from the dataset's last error): {e}")

        # numpy, optional: fill caller's buffers in place
        try:
            import numpy as np
        except ImportError:
            np = None
        if np is not None:
            with ds.loader(micro_batch=4, **common) as ld:
                inp = np.zeros((4, T), np.int32)
                tgt = np.zeros((4, T), np.int32)
                ids = np.zeros(4, np.int64)
                b = ld.next(inp, tgt, ids)
                check(b.inputs is inp and ids.tolist() == stream[:4] and
                      inp[0].tolist() == windows[stream[0]][1][:T] and
                      tgt[3].tolist() == windows[stream[3]][1][1:],
                      "numpy buffers filled in place")
            ok("numpy buffers")
        ok("loader errors raise with status and the handle's last error")


def main():
    try:
        lib = L.Library(sys.argv[1] if len(sys.argv) > 1 else None)
    except (OSError, AttributeError) as e:
        print("SKIP: cannot load libllmtrain:", e)
        return 77

    check_layouts(lib)

    # the synthetic corpus
    a, rate = L.synth_markov(lib, 4000, seed=3, alphabet=8, branching=3)
    b, rate2 = L.synth_markov(lib, 4000, seed=3, alphabet=8, branching=3)
    c, _ = L.synth_markov(lib, 4000, seed=4, alphabet=8, branching=3)
    check(a == b and rate == rate2 and a != c, "synth is deterministic in its seed")
    check(set(a) <= set(b"etaoins ") and 0 < rate <= math.log(3) + 1e-12,
          f"synth: alphabet and entropy rate {rate}")
    try:
        L.synth_markov(lib, 10, alphabet=1)
        check(False, "synth alphabet 1 raises")
    except L.Error as e:
        check(e.status == L.ERR_INVALID_ARGUMENT, f"synth alphabet 1: {e}")
    ok(f"synth_markov: entropy rate {rate:.4f} nats/char")

    tmp = tempfile.mkdtemp(prefix="llmt-pydata-")
    try:
        corpus = os.path.join(tmp, "corpus")
        os.mkdir(corpus)
        docs, verdicts, bad_lines, invalid = make_corpus(corpus)
        kept = unique_kept(docs)
        nbytes = sum(os.path.getsize(p) for p in
                     glob.glob(os.path.join(corpus, "**", "*.*"), recursive=True))

        logs = []
        with L.Context(lib, log_level="warn",
                       log_fn=lambda *m: logs.append(m)) as ctx:
            byte_tok = L.Tokenizer.create_bytes(ctx)
            samples = [d.encode() for d in docs[:5]] + [bytes(range(256)), b"\xff\xfe\x00z"]
            check((byte_tok.vocab_size, byte_tok.eot) == (257, 256), "bytes: vocab 257, eot 256")
            check_tokenizer(byte_tok, "bytes", samples)

            progress = []
            out = os.path.join(tmp, "bytes")
            rep = L.prepare(ctx, [corpus], byte_tok, out, ingest={"doc_separator": "%"},
                            val_fraction=0.2, shard_tokens=1500,
                            progress=lambda done, total, n: progress.append((done, total, n)))
            expect_kept = verdicts["keep"]
            check(rep.files == 3 and rep.documents == len(docs) and rep.bytes == nbytes,
                  f"report: files {rep.files}, documents {rep.documents}/{len(docs)}, "
                  f"bytes {rep.bytes}/{nbytes}")
            check(rep.bad_lines == bad_lines and rep.invalid_utf8 == invalid,
                  f"report: bad_lines {rep.bad_lines}, invalid_utf8 {rep.invalid_utf8}")
            want = [verdicts[v] for v in L.VERDICTS]
            check(list(rep.verdicts) == want, f"report verdicts {rep.verdict_counts()} "
                  f"== {dict(zip(L.VERDICTS, want))}")
            check(rep.kept == expect_kept == rep.train_documents + rep.val_documents
                  and rep.val_documents > 0,
                  f"report: kept {rep.kept} = train {rep.train_documents} + val "
                  f"{rep.val_documents}")
            check(len(kept) == expect_kept, f"{len(kept)} kept documents derived")
            check(rep.train_tokens + rep.val_tokens == sum(1 + len(d.encode()) for d in kept),
                  "bytes: tokens = one <|endoftext|> + the bytes of each kept document")
            check(rep.train_shards == len(glob.glob(os.path.join(out, "train", "*.tok")))
                  and rep.train_shards >= 3, f"report: {rep.train_shards} train shards")
            check(progress and progress[-1][0] == progress[-1][1] == nbytes
                  and progress[-1][2] == len(docs), f"progress callback: last {progress[-1:]}")
            jsonl = os.path.join(corpus, "docs.jsonl")
            check(("warn", "data", f"ingest: {jsonl} line 6: malformed JSON") in logs and
                  ("warn", "data", f"ingest: {jsonl} line 9: no text field") in logs,
                  f"bad JSONL lines logged through the Python log_fn: {logs[:3]}")
            with open(os.path.join(out, "report.json")) as f:
                rj = json.load(f)
            check(rj["kept"] == rep.kept and rj["train_tokens"] == rep.train_tokens,
                  "report.json agrees with llmt_data_report")
            ok(f"prepare (bytes): {rep.documents} read, {rep.kept} kept, "
               f"{rep.train_shards}+{rep.val_shards} shards")
            try:
                L.prepare(ctx, [corpus], byte_tok, out)
                check(False, "preparing into a prepared directory raises")
            except L.Error as e:
                check(e.status == L.ERR_INVALID_ARGUMENT and "holds" in e.detail
                      and e.report.documents == 0, f"prepare twice: {e}")
            try:
                L.prepare(ctx, [os.path.join(tmp, "missing")], byte_tok,
                          os.path.join(tmp, "x"))
                check(False, "a missing input raises")
            except L.Error as e:
                check(e.status == L.ERR_NOT_FOUND and "missing" in e.detail,
                      f"missing input: {e}")

            shards = check_prepared(lib, ctx, out, byte_tok, kept, "bytes")
            check_loader(lib, ctx, out, shards)

            # BPE trained from Python on the kept documents
            bpe = L.Tokenizer.train_bpe(ctx, "\n\n".join(kept), 400)
            check(257 < bpe.vocab_size <= 400 and bpe.eot == bpe.vocab_size - 1,
                  f"bpe: vocab {bpe.vocab_size}, eot {bpe.eot}")
            check(len(bpe.encode(kept[0])) < len(kept[0].encode()), "bpe compresses")
            check_tokenizer(bpe, "bpe", samples)
            out2 = os.path.join(tmp, "bpe")
            rep2 = L.prepare(ctx, [corpus], bpe, out2, ingest={"doc_separator": "%"},
                             val_fraction=0.2, shard_tokens=1000)
            check(rep2.documents == len(docs) and list(rep2.verdicts) == want,
                  "bpe: same documents and verdicts")
            check(rep2.train_documents == rep.train_documents,
                  "bpe: the split depends on the text only")
            check(rep2.train_tokens + rep2.val_tokens ==
                  sum(1 + len(bpe.encode(d)) for d in kept), "bpe: token count")
            with L.Tokenizer.load(ctx, os.path.join(out2, "tokenizer.bin")) as back:
                check((back.vocab_size, back.eot) == (bpe.vocab_size, bpe.eot) and
                      all(back.encode(d) == bpe.encode(d) for d in kept),
                      "bpe: tokenizer.bin loads and encodes the same")
                clone = back.clone()
                check(clone.encode(kept[1]) == bpe.encode(kept[1]), "clone encodes the same")
            saved = os.path.join(tmp, "bpe.tok")
            bpe.save(saved)
            with L.Tokenizer.load(ctx, saved) as again:
                check(again.encode(kept[2]) == bpe.encode(kept[2]), "save/load round trip")
            check_prepared(lib, ctx, out2, bpe, kept, "bpe")
            check_long_token(lib, ctx)
            ok(f"prepare (bpe {bpe.vocab_size}): {rep2.train_tokens + rep2.val_tokens} tokens "
               f"for {rep.train_tokens + rep.val_tokens} bytes")

            ds = L.Dataset(ctx, os.path.join(out, "train"))
            ld = ds.loader(seq_len=8)
            try:
                L.Dataset(ctx, os.path.join(tmp, "nothing-here"))
                check(False, "opening a missing dataset raises")
            except L.Error as e:
                check(e.status != 0 and e.detail == ctx.last_error() and
                      ctx.last_status() == e.status, f"dataset open error from the context: {e}")
        check(not ctx.handle and not byte_tok.handle and not bpe.handle and not ds.handle
              and not ld.handle and not clone.handle,
              "closing the context closed its tokenizers, datasets and loaders")
        try:
            ld.next()
            check(False, "a closed loader raises")
        except L.Error as e:
            check(e.status == L.ERR_STATE, f"closed loader: {e}")
        ok("handles freed deterministically")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("FAILED: %d check(s)" % failures if failures else "all data checks passed")
    return 1 if failures else 0


def unique_kept(docs):
    """The documents prepare must keep: at least 16 code points, not equal
    to an earlier kept one, and not the near copy (an earlier document plus
    one word: the only near duplicate the corpus holds)."""
    kept = []
    for d in docs:
        if len(d) < 16 or d in kept:
            continue
        if any(d.startswith(k[:-2] + " ") and d.count(" ") == k.count(" ") + 1 for k in kept):
            continue
        kept.append(d)
    return kept


if __name__ == "__main__":
    sys.exit(main())
