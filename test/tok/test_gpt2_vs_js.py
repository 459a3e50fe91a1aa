#!/usr/bin/env python3
"""GPT-2 BPE against the reference encoder: the ids of every document of a
varied corpus (hand-written edge cases, seeded random Unicode and
punctuation strings, the fortunes corpus when installed) must equal those
of gpt-3-encoder's Encoder.js run with node, and decoding our ids must give
the corpus back byte for byte. Exits 77 (SKIP) without node or the files.

usage: test_gpt2_vs_js.py TOK_TOOL [GPT2_DIR]
GPT2_DIR defaults to $LLMT_GPT2_DIR, else ../shared/data/gpt2-tokenizer
beside the source tree."""
import os
import random
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def handwritten():
    d = [
        "Hello world", "Hello, world!", " leading space", "trailing space ",
        "trailing spaces   ", "   ", " ", "", "\n", "\n\n\n", "a\n\nb", "a \n b",
        "tab\there", "\t\t\tindented", "mixed \t \n whitespace \r\n end",
        "windows\r\nline\r\nends\r\n", "form\x0cfeed\x0bvtab",
        "don't can't won't I'm you're we've they'll he'd it's",
        "DON'T I'LL WE'VE 'S 'T", "'s's'''ll'", "rock 'n' roll", "''quoted''",
        "o'clock ma'am y'all", "x's 't 're 've 'm 'll 'd",
        "123 4567 89012345 3.14159 -42 +7 1,000,000 1e10 0x1F",
        "a1b2c3 abc123def 12abc", "2023-01-01T12:00:00Z",
        "café naïve résumé Ångström Zürich façade", "e\u0301 e\u0301\u0301 a\u0308o\u0308",
        "Straße ΑΒΓ αβγ Привет мир ½ ² ³ Ⅻ ① ٣٤٥ ०१२",
        "日本語のテキスト、中文文本。한국어 텍스트", "中文 中文  中文",
        "😀 😃😄 👍🏽 👨‍👩‍👧‍👦 🇫🇷🇩🇪 ❤️ ✨", "emoji😀inside", "🎉🎉🎉🎉",
        "हिन्दी भाषा", "العربية لغة", "ภาษาไทย", "עברית",
        "nbsp\u00a0here", "em\u2003space", "ideographic\u3000space",
        "line\u2028sep", "bom\ufefftext", "zero\u200bwidth", "nnbsp\u202fx",
        "\u00a0\u00a0 \u00a0x", " \u3000 x", "\u2028\u2029",
        "<|endoftext|>", "a<|endoftext|>b",
        "https://example.com/path?q=1&r=2#frag", "user@example.com",
        "def f(x):\n    return x ** 2  # square\n\n\nprint(f(3))\n",
        "int main(void) {\n\tprintf(\"%d\\n\", 42);\n}\n",
        '{"a": [1, 2, 3], "b": {"c": "d"}}', '["x","y"],["z"]', '{"a":1},{"b":2}',
        '"",""', "'','',''", ")),((", "]],[[", '.",".","', ' ",", "', ".,.,.,",
        "!!!!!!!!!!!!!!!!", "?!?!", "...", "—–-", "«»‹›„“”‘’", "§¶†‡•",
        "a" * 300, " " * 300 + "x", "ab" * 200, "\n" * 50 + "x",
        "1" * 120, "=" * 80, "x" * 5000,
        "The quick brown fox jumps over the lazy dog. " * 5,
        "ﬁ ﬂ ﬀ", "Ⅰ Ⅱ Ⅲ", "ℌ ℍ ℎ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛", "𐍈 𐌰𐌱", "\U0001F600x\U0001F600",
        "control\x01\x02\x1f chars\x7f", "tilde~caret^back`slash\\",
    ]
    return d


def unicode_versions(node):
    """(Unicode version of lib/data/tok/unicode_tab.c, of this node)."""
    src = os.environ.get("LLMT_SOURCE_ROOT", os.path.join(HERE, "..", ".."))
    tab = None
    try:
        with open(os.path.join(src, "lib", "data", "tok", "unicode_tab.c")) as f:
            head = f.read(400)
        tab = head.split("(Unicode ", 1)[1].split(")", 1)[0]
    except (OSError, IndexError):
        pass
    js = subprocess.run([node, "-p", "process.versions.unicode"], capture_output=True,
                        text=True).stdout.strip()
    return tab, js


def random_docs(rng, n, any_cp=True):
    pool = (list("abcdefghijklmnopqrstuvwxyzABCXYZ0123456789") +
            list("     \t\n\r.,;:!?'\"()[]{}<>-_/\\@#$%^&*+=|~`") +
            ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "  ", "\n\n", " \n"] +
            list("éñßΩжЖ中文日한ا") + ["ह", "ि", "\u0301", "😀", "👍🏽", "\u200d",
                                  "🇫🇷", "\u00a0", "\u2003", "\u3000", "\u2028",
                                  "\ufeff", "\u200b", "٣", "²", "½", "Ⅻ", "①"])
    out = []
    for _ in range(n):
        k = rng.randint(1, 40)
        out.append("".join(rng.choice(pool) for _ in range(k)))
    # any code point (surrogates and NUL aside), mixed with spaces and letters:
    # checks the class table against the JavaScript engine everywhere
    for _ in range(n if any_cp else 0):
        k = rng.randint(1, 30)
        cs = []
        for _ in range(k):
            r = rng.random()
            if r < 0.2:
                cs.append(rng.choice(" a1\n\t,"))
            else:
                top = 0xFFFF if r < 0.7 else 0x10FFFF
                cp = rng.randint(1, top)
                while 0xD800 <= cp <= 0xDFFF:
                    cp = rng.randint(1, top)
                cs.append(chr(cp))
        out.append("".join(cs))
    # punctuation around commas and quotes: the pairs the reference ranks by
    # the string "left,right" (aliases)
    punct = list('",]}[{)(\'.: ab')
    for _ in range(n):
        k = rng.randint(1, 24)
        out.append("".join(rng.choice(punct) for _ in range(k)))
    return out


def exhaustive_punct():
    """Every string of 1..4 characters over quotes, commas, brackets, dots
    and space: where the reference's string-keyed ranks could matter."""
    al = '",])}.\'[ '
    out = [""]
    res = []
    for _ in range(4):
        out = [o + c for o in out for c in al]
        res += out
    return res


def fortunes():
    root = "/usr/share/games/fortunes"
    docs = []
    if not os.path.isdir(root):
        return docs
    for name in sorted(os.listdir(root)):
        p = os.path.join(root, name)
        if name.endswith((".dat", ".u8")) or not os.path.isfile(p):
            continue
        with open(p, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
        docs.extend(text.split("\n%\n"))
    return docs


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    tool = sys.argv[1]
    gdir = sys.argv[2] if len(sys.argv) > 2 else os.environ.get("LLMT_GPT2_DIR") or \
        os.path.join(os.environ.get("LLMT_SOURCE_ROOT", os.path.join(HERE, "..", "..")),
                     "..", "shared", "data", "gpt2-tokenizer")
    node = shutil.which("node")
    files = [os.path.join(gdir, f) for f in ("Encoder.js", "encoder.json", "vocab.bpe")]
    if not node or not all(os.path.isfile(f) for f in files):
        print("SKIP: needs node and %s/{Encoder.js,encoder.json,vocab.bpe}" % gdir)
        return 77
    rng = random.Random(1234)
    tab, js = unicode_versions(node)
    any_cp = tab is not None and tab == js
    if not any_cp:
        print("note: unicode_tab.c is Unicode %s, node has %s: strings of arbitrary code "
              "points left out (regenerate the table with gen_unicode.js)" % (tab, js))
    docs = handwritten() + random_docs(rng, 1500, any_cp) + exhaustive_punct()
    fort = fortunes()
    docs += fort
    for d in docs:
        assert "\0" not in d
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.txt")
        raw = "\0".join(docs).encode("utf-8")
        with open(corpus, "wb") as f:
            f.write(raw)
        ref = subprocess.run([node, os.path.join(HERE, "gpt2_ref.js"), files[0], corpus],
                             capture_output=True, check=True).stdout.decode().split("\n")
        spec = "gpt2:%s:%s" % (files[1], files[2])
        ours = subprocess.run([tool, "encode", spec, corpus], capture_output=True,
                              check=True).stdout
        got = ours.decode().split("\n")
        bad = 0
        for i, d in enumerate(docs):
            if ref[i] != got[i]:
                bad += 1
                if bad <= 5:
                    r, g = ref[i].split(), got[i].split()
                    k = next((j for j in range(min(len(r), len(g))) if r[j] != g[j]),
                             min(len(r), len(g)))
                    print("MISMATCH doc %d %r\n  first difference at id %d\n  ref %s\n  our %s"
                          % (i, d[:200], k, r[max(0, k - 3):k + 6], g[max(0, k - 3):k + 6]))
        ntok = sum(len(x.split()) for x in got)
        print("%d documents (%d fortunes), %d bytes, %d tokens: %d differ from Encoder.js"
              % (len(docs), len(fort), len(raw), ntok, bad))
        table_ok = True
        if any_cp:
            src = os.environ.get("LLMT_SOURCE_ROOT", os.path.join(HERE, "..", ".."))
            gen = os.path.join(src, "lib", "data", "tok", "gen_unicode.js")
            fresh = subprocess.run([node, gen], capture_output=True, text=True,
                                   check=True).stdout
            with open(os.path.join(os.path.dirname(gen), "unicode_tab.c")) as f:
                have = f.read()
            cut = lambda t: t[t.index("#include"):]
            table_ok = cut(fresh) == cut(have)
            print("unicode_tab.c equals the classes of this node's regex engine: %s"
                  % table_ok)
        dec = subprocess.run([tool, "decode", spec], input=ours, capture_output=True,
                             check=True).stdout
        rt = dec == raw
        print("decode(encode(corpus)) == corpus: %s" % rt)
        return 0 if bad == 0 and rt and table_ok else 1


if __name__ == "__main__":
    sys.exit(main())
