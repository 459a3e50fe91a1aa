#!/usr/bin/env python3
"""Generate doc/abi-reference.md from include/llmtrain.h.

The header is the contract and its comments are the documentation; this
script only rearranges them into a page a newcomer can browse: one part per
header section (its introduction, its types, then every function with its
prototype and the comment written above it), and an index of every
exported symbol with the version that added it (abi/symbols.txt).

usage: tools/abi_ref.py [--check] [ROOT]
  without --check: write ROOT/doc/abi-reference.md
  --check: exit 1 when that file is not what the header gives, or when a
           symbol of abi/symbols.txt is not documented (the test abi/reference)
"""
import os
import re
import sys

SECTION_RULE = re.compile(r"^/\* =+$")


def comment_text(lines):
    """The text of a /* ... */ block, without the comment markers."""
    out = []
    for ln in lines:
        s = ln.strip()
        if s.startswith("/*"):
            s = s[2:]
        if s.endswith("*/"):
            s = s[:-2]
        s = s.strip()
        if s.startswith("* "):
            s = s[2:]
        elif s == "*":
            s = ""
        if re.fullmatch(r"[=\-]{3,}.*", s) and set(s.strip()) <= set("=-"):
            continue
        out.append(s.rstrip())
    while out and not out[0]:
        out.pop(0)
    while out and not out[-1]:
        out.pop()
    return out


def parse(header):
    """Sections: [{title, intro, items: [(kind, name, code, doc)]}]."""
    lines = open(header, encoding="ascii").read().split("\n")
    sections = []
    cur = None
    pending = []          # the comment block just above the current line
    i = 0
    n = len(lines)
    while i < n:
        ln = lines[i]
        s = ln.strip()
        if SECTION_RULE.match(s):
            j = i + 1
            block = []
            while j < n and not lines[j].strip().startswith("* ====="):
                block.append(lines[j])
                j += 1
            text = comment_text(block)
            title = text[0] if text else "Untitled"
            rest = text[1:]
            # a title that runs onto a second line ending its "(doc/...)"
            if rest and not title.endswith(")") and rest[0].endswith(")"):
                title += " " + rest.pop(0)
            cur = {"title": title, "intro": rest, "items": []}
            sections.append(cur)
            pending = []
            i = j + 1
            continue
        if s.startswith("/*"):
            j = i
            block = [lines[j]]
            while "*/" not in lines[j]:
                j += 1
                block.append(lines[j])
            pending = comment_text(block)
            if s.startswith("/* --") and cur is not None:
                cur["items"].append(("sub", None, None, pending))
                pending = []
            i = j + 1
            continue
        if cur is None or not s:
            i += 1
            continue
        if s.startswith("LLMT_API"):
            j = i
            code = [lines[j]]
            while ";" not in lines[j]:
                j += 1
                code.append(lines[j])
            decl = " ".join(c.strip() for c in code)
            m = re.search(r"\b(llmt_[a-z0-9_]+)\s*\(", decl)
            name = m.group(1) if m else "?"
            cur["items"].append(("fn", name, "\n".join(code), pending))
            pending = []
            i = j + 1
            continue
        if s.startswith("typedef") and s.endswith("{"):
            j = i
            code = [lines[j]]
            while not re.match(r"^\}\s*\w+;", lines[j].strip()):
                j += 1
                code.append(lines[j])
            name = re.match(r"^\}\s*(\w+);", lines[j].strip()).group(1)
            cur["items"].append(("type", name, "\n".join(code), pending))
            pending = []
            i = j + 1
            continue
        if s.startswith("typedef"):
            j = i
            code = [lines[j]]
            while ";" not in lines[j]:
                j += 1
                code.append(lines[j])
            m = re.findall(r"\b(llmt_[a-z0-9_]+)\b", " ".join(code))
            name = m[-1] if m else "?"
            if "(*" in " ".join(code):
                name = re.search(r"\(\*\s*(\w+)\)", " ".join(code)).group(1)
            cur["items"].append(("type", name, "\n".join(code), pending))
            pending = []
            i = j + 1
            continue
        if s.startswith("#define LLMT_"):
            j = i
            code = [lines[j].rstrip()]
            while lines[j].rstrip().endswith("\\"):
                j += 1
                code.append(lines[j].rstrip())
            cur["items"].append(("macro", s.split()[1], "\n".join(code), []))
            i = j + 1
            continue
        i += 1
    return [sec for sec in sections if sec["items"] or sec["intro"]]


def md(lines):
    """Comment text as Markdown prose: a '*' (pointer outputs like *out)
    would start emphasis, so it is escaped."""
    return [ln.replace("*", "\\*") for ln in lines]


def anchor(title):
    a = re.sub(r"[^a-z0-9 -]", "", title.lower()).strip().replace(" ", "-")
    return a


def render(sections, versions):
    out = ["# ABI reference", "",
           "Generated from `include/llmtrain.h` by `tools/abi_ref.py` (the test",
           "`abi/reference` fails when this page is out of date): the header's",
           "sections in order, each with its types and functions and the comment",
           "written above them. Conventions (handles, status codes, option",
           "structs, threads) are in [abi-conventions.md](abi-conventions.md);",
           "the exported symbols and the version that added each are in",
           "`abi/symbols.txt`.", "", "## Sections", ""]
    for sec in sections:
        nfn = sum(1 for it in sec["items"] if it[0] == "fn")
        out.append(f"- [{sec['title']}](#{anchor(sec['title'])}) "
                   f"({nfn} function{'' if nfn == 1 else 's'})")
    out.append("")
    for sec in sections:
        out += [f"## {sec['title']}", ""]
        if sec["intro"]:
            out += md(sec["intro"]) + [""]
        macros = [it for it in sec["items"] if it[0] == "macro"]
        if macros:
            out += ["```c"] + [it[2] for it in macros] + ["```", ""]
        for kind, name, code, doc in sec["items"]:
            if kind == "sub":
                out += ["#### " + (doc[0].lstrip("- ").rstrip(".") if doc else ""), ""]
                if len(doc) > 1:
                    out += md(doc[1:]) + [""]
            elif kind in ("fn", "type"):
                tag = ""
                if kind == "fn" and name in versions:
                    tag = f" (since {versions[name]})"
                out += [f"### `{name}`{tag}", ""]
                if doc:
                    out += md(doc) + [""]
                out += ["```c", code.rstrip(), "```", ""]
    return "\n".join(out).rstrip() + "\n"


def main(argv):
    check = "--check" in argv
    args = [a for a in argv[1:] if a != "--check"]
    root = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    header = os.path.join(root, "include", "llmtrain.h")
    doc = os.path.join(root, "doc", "abi-reference.md")
    versions = {}
    with open(os.path.join(root, "abi", "symbols.txt")) as f:
        for ln in f:
            if ln.startswith("llmt_"):
                k, v = ln.split()[:2]
                versions[k] = v
    text = render(parse(header), versions)
    if not check:
        with open(doc, "w") as f:
            f.write(text)
        print(f"wrote {doc}")
        return 0
    rc = 0
    try:
        have = open(doc).read()
    except OSError:
        have = ""
    if have != text:
        print(f"{doc} is out of date: run tools/abi_ref.py")
        rc = 1
    documented = set(re.findall(r"^### `(llmt_[a-z0-9_]+)`", text, re.M))
    missing = sorted(set(versions) - documented)
    if missing:
        print("exported but not found in the header's sections: " + ", ".join(missing))
        rc = 1
    if rc == 0:
        print(f"abi-reference.md is current: {len(documented)} entries, "
              f"every one of the {len(versions)} exported symbols documented")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
