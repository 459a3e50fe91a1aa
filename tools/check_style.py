#!/usr/bin/env python3
"""House style, checked by a machine (STYLE.md, issue 15).

  tools/check_style.py [--base COMMIT] [--fix [PATH...]]

1. Formatting: every C line changed since BASE (default: the commit that
   added .clang-format, so all code written since the house style was
   adopted) is as clang-format formats it (git clang-format, changed lines
   only: untouched old code is not churned; generated files and the
   hand-aligned public header excepted). --fix rewrites them.
2. Every definition of an exported function (abi/symbols.txt) in lib/ and
   cuda/ is marked LLMT_API, as its declaration in include/llmtrain.h is.
3. No prototype of an llmt_/llmt__ function is declared inside a .c file:
   it belongs in the module's internal header, where the compiler checks
   both sides.
4. A comment that names a file of the tree (lib/..., tools/..., doc/...)
   names one that exists.

Exit 0 when clean, 1 with one line per finding, 77 when clang-format (or
the git history the diff needs) is absent.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys

TOP = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
C_DIRS = ("lib", "cuda", "tools", "test", "bench", "examples", "include")
SRC_EXT = (".c", ".h")


def git(*args):
    return subprocess.run(["git", "-C", TOP] + list(args), capture_output=True, text=True)


def c_files(dirs, exts=SRC_EXT):
    for d in dirs:
        for root, _, files in os.walk(os.path.join(TOP, d)):
            for f in sorted(files):
                if f.endswith(exts):
                    yield os.path.join(root, f)


def rel(p):
    return os.path.relpath(p, TOP)


# The public header is hand-aligned documentation (trailing comments that
# run over several lines line up with their field; clang-format would leave
# their continuation lines behind): it is checked by the header tests
# (C99, C++), not reformatted.
FORMAT_EXCLUDE = {"include/llmtrain.h"}


def generated(path):
    with open(os.path.join(TOP, path), errors="replace") as f:
        head = "".join(f.readline() for _ in range(5)).lower()
    return "generated" in head and "do not edit" in head


def check_format(base, fix, only=None):
    """Changed lines since base, through git clang-format."""
    gcf = shutil.which("git-clang-format") or shutil.which("git-clang-format-14")
    if not gcf or not shutil.which("clang-format"):
        return None, "clang-format is not installed (Debian: clang-format)"
    if base is None:
        r = git("log", "--diff-filter=A", "--format=%H", "--", ".clang-format")
        commits = r.stdout.split()
        if r.returncode or not commits:
            return None, "no commit adds .clang-format (a shallow clone?)"
        base = commits[-1]
    if git("cat-file", "-e", base + "^{commit}").returncode:
        return None, "commit %s is not in this clone (a shallow clone?)" % base
    # the C files changed since base, less generated ones (their generator
    # owns their layout: a header line says "generated ... do not edit")
    r = git("diff", "--name-only", base, "--", *C_DIRS)
    paths = [p for p in r.stdout.split() if p.endswith(SRC_EXT)
             and os.path.exists(os.path.join(TOP, p)) and not generated(p)
             and p not in FORMAT_EXCLUDE]
    if only:
        paths = [p for p in paths if any(p == o or p.startswith(o.rstrip("/") + "/")
                                         for o in only)]
    if not paths:
        return [], None
    cmd = [gcf, "--binary", shutil.which("clang-format"), "--extensions", "c,h",
           base]
    if not fix:
        cmd.insert(1, "--diff")
    cmd += ["--"] + paths
    r = subprocess.run(cmd, cwd=TOP, capture_output=True, text=True)
    out = r.stdout
    if fix or "diff --git" not in out:
        return [], None
    findings, cur = [], None
    for line in out.splitlines():
        m = re.match(r"diff --git a/(\S+)", line)
        if m:
            cur = m.group(1)
        m = re.match(r"@@ -(\d+)", line)
        if m and cur:
            findings.append("%s:%s: not formatted as .clang-format says "
                            "(tools/check_style.py --fix)" % (cur, m.group(1)))
    return findings, None


def exported():
    with open(os.path.join(TOP, "abi", "symbols.txt")) as f:
        return {l.split()[0] for l in f if l.strip() and not l.startswith("#")}


DEF_RE = re.compile(r"^(LLMT_API\s+)?(?:const\s+)?[A-Za-z_][\w]*(?:\s*\*+\s*|\s+)(\**)(llmt_[a-z0-9_]+)\s*\(")


def check_api_marks():
    syms, findings = exported(), []
    for p in c_files(("lib", "cuda"), (".c", ".cu")):
        with open(p, errors="replace") as f:
            lines = f.readlines()
        for i, line in enumerate(lines):
            m = DEF_RE.match(line)
            if not m or m.group(3) not in syms:
                continue
            # a definition: the signature ends in "{" on a later line, not ";"
            j, sig = i, line
            while j + 1 < len(lines) and not re.search(r"[;{]\s*$", sig):
                j += 1
                sig += lines[j]
            if sig.rstrip().endswith("{") or (j + 1 < len(lines) and lines[j + 1].startswith("{")):
                if not m.group(1):
                    findings.append("%s:%d: definition of exported %s lacks LLMT_API"
                                    % (rel(p), i + 1, m.group(3)))
    return findings


PROTO_RE = re.compile(r"^(?!static\b|typedef\b|return\b|#)[A-Za-z_][\w\s\*]*\b(llmt__?[a-z0-9_]+)\s*\(")


def check_prototypes():
    findings = []
    for p in c_files(("lib", "cuda", "tools"), (".c", ".cu")):
        with open(p, errors="replace") as f:
            lines = f.readlines()
        depth = 0
        for i, line in enumerate(lines):
            if depth == 0:
                m = PROTO_RE.match(line)
                if m:
                    j, sig = i, line
                    while j + 1 < len(lines) and not re.search(r"[;{]\s*$", sig) \
                            and not lines[j + 1].startswith("{"):
                        j += 1
                        sig += lines[j]
                    if sig.rstrip().endswith(");") and "=" not in sig.split("(")[0]:
                        findings.append("%s:%d: prototype of %s in a .c file: declare it "
                                        "in the module's internal header" % (rel(p), i + 1,
                                                                           m.group(1)))
            depth += line.count("{") - line.count("}")
            depth = max(depth, 0)
    return findings


PATH_RE = re.compile(r"(?<![\w/.])((?:lib|cuda|tools|test|bench|doc|include|examples|abi)/"
                     r"[A-Za-z0-9_./-]*[A-Za-z0-9_])")
COMMENT_RE = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def check_stale_paths():
    findings = []
    for p in c_files(C_DIRS, (".c", ".h", ".cu")):
        with open(p, errors="replace") as f:
            text = f.read()
        for cm in COMMENT_RE.finditer(text):
            for m in PATH_RE.finditer(cm.group(0)):
                path = m.group(1).rstrip(".")
                if "*" in path or "<" in path:
                    continue
                if not os.path.exists(os.path.join(TOP, path)):
                    line = text.count("\n", 0, cm.start() + m.start()) + 1
                    findings.append("%s:%d: comment names %s, which does not exist"
                                    % (rel(p), line, path))
    return findings


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", help="check lines changed since this commit")
    ap.add_argument("--fix", action="store_true", help="reformat changed lines")
    ap.add_argument("paths", nargs="*", help="with --fix: only these files or folders")
    a = ap.parse_args()
    fmt, why = check_format(a.base, a.fix, a.paths)
    findings = (fmt or []) + check_api_marks() + check_prototypes() + check_stale_paths()
    for f in findings:
        print(f)
    if findings:
        print("check_style: %d finding(s)" % len(findings))
        return 1
    if fmt is None:
        print("check_style: SKIP formatting: %s; the other rules pass" % why)
        return 77
    print("check_style: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
