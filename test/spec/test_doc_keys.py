#!/usr/bin/env python3
"""Every key the spec parser takes (`llmtrain plan --keys`) is in the key
blocks of doc/job-spec.md, and every key those blocks show is one the
parser takes: the reference cannot drift from the parser (a walk-through
on 2026-11-27 found 15 keys missing from it).
Usage: test_doc_keys.py LLMTRAIN DOC (test spec-doc-keys)"""
import json
import re
import subprocess
import sys


def doc_keys(text):
    keys = set()

    def walk(o, path):
        if isinstance(o, dict):
            for k, v in o.items():
                q = path + "." + k if path else k
                keys.add(q)
                walk(v, q)
        elif isinstance(o, list):  # an array of objects: path[].key
            for e in o:
                if isinstance(e, dict):
                    walk(e, path + "[]")

    blocks = re.findall(r"```jsonc\n(.*?)```", text, re.S)
    for b in blocks:
        walk(json.loads(re.sub(r"//[^\n]*", "", b)), "")
    return keys, len(blocks)


def main():
    exe, doc = sys.argv[1], sys.argv[2]
    out = subprocess.run([exe, "plan", "--keys"], capture_output=True, text=True, check=True)
    parser = {line.split()[0] for line in out.stdout.splitlines() if line.strip()}
    shown, nblocks = doc_keys(open(doc, encoding="utf-8").read())
    fails = 0
    if nblocks == 0 or len(parser) < 50:
        print(f"FAIL {nblocks} key blocks in the doc, {len(parser)} parser keys")
        return 1
    for k in sorted(parser - shown):
        print(f"FAIL the parser takes {k}, doc/job-spec.md does not show it")
        fails += 1
    for k in sorted(shown - parser):
        print(f"FAIL doc/job-spec.md shows {k}, the parser does not take it")
        fails += 1
    print(f"{'ok  ' if not fails else 'FAIL'} {len(parser)} parser keys, {len(shown)} "
          f"in {nblocks} doc blocks, {fails} differences")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
