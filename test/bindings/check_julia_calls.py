#!/usr/bin/env python3
"""The Julia idiomatic layer against the generated one, statically (Julia is
not installed where the suite runs, so this is what checks
bindings-template/julia/LLMTrain.jl everywhere):

- every generated function it calls (`llmt_x(...)` or
  `LibLLMTrain.llmt_x(...)`) exists in src/LibLLMTrain.jl with that number
  of arguments; a generated struct called as a constructor gets one
  argument per field;
- every other `llmt_*` name it uses is a generated type or function, every
  `LLMT_*` constant it (or job_test.jl) uses is generated;
- every option field it sets with `setf!(var, :field, ...)` or reads as
  `var.field` / `var[].field`, where `var` came from `sized(T)`, `Ref(T(...))`
  or `other[]`, is a field of that struct;
- a raw `ccall((:llmt_x, ...), R, (A...), ...)` has the generated
  wrapper's return and argument types (Cstring = Ptr{UInt8}, Cint = Int32).

Then a copy of the file with one argument dropped, one unknown field and one
unknown function must fail, so the check cannot pass vacuously.
usage: check_julia_calls.py SOURCE_ROOT   (exit 1 on any problem)"""
import os
import re
import sys

NORM = {"Cstring": "Ptr{UInt8}", "Cint": "Int32", "Cuint": "UInt32", "Clonglong": "Int64",
        "Culonglong": "UInt64", "Cfloat": "Float32", "Cdouble": "Float64",
        "Cchar": "UInt8", "Cvoid": "Cvoid", "Nothing": "Cvoid"}


def sanitize(text):
    """Comments and string/char literal contents to spaces (positions kept)."""
    out, i, n = list(text), 0, len(text)

    def blank(a, b):
        for k in range(a, b):
            if out[k] != "\n":
                out[k] = " "
    while i < n:
        c = text[i]
        if text.startswith("#=", i):
            j = text.find("=#", i + 2)
            j = n if j < 0 else j + 2
            blank(i, j)
            i = j
        elif c == "#":
            j = text.find("\n", i)
            j = n if j < 0 else j
            blank(i, j)
            i = j
        elif c == '"':
            q = '"""' if text.startswith('"""', i) else '"'
            j = i + len(q)
            while j < n and not text.startswith(q, j):
                j += 2 if text[j] == "\\" else 1
            blank(i + len(q), j)
            i = j + len(q)
        elif c == "'" and re.match(r"'(\\.[^']*|[^'\\])'", text[i:i + 12]) and \
                (i == 0 or not re.match(r"[\w)\]}'.]", text[i - 1])):
            j = text.index("'", i + 2 if text[i + 1] == "\\" else i + 1)
            blank(i + 1, j)
            i = j + 1
        else:
            i += 1
    return "".join(out)


def split_args(s, start):
    """s[start] is '('; returns (positional args, index after ')')."""
    depth, i, cur, args, kw = 0, start, [], [], False
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack = []
    while i < len(s):
        c = s[i]
        if c in pairs:
            stack.append(pairs[c])
            if len(stack) > 1:
                cur.append(c)
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                a = "".join(cur).strip()
                if a and not kw:
                    args.append(a)
                return args, i + 1
            cur.append(c)
        elif c == "," and len(stack) == 1:
            a = "".join(cur).strip()
            if not kw:
                args.append(a)
            cur = []
        elif c == ";" and len(stack) == 1:
            a = "".join(cur).strip()
            if a and not kw:
                args.append(a)
            cur, kw = [], True
        else:
            cur.append(c)
        i += 1
    raise ValueError("unbalanced parentheses at %d" % start)


def generated(lib_text):
    funcs, types = {}, {}
    for m in re.finditer(r"^(llmt_\w+)\(([^)]*)\) = ccall\(", lib_text, re.M):
        params = [p for p in m.group(2).split(",") if p.strip()]
        cargs, _ = split_args(lib_text, m.end() - 1)  # (sym, lib), ret, (types,), args...
        argt = [a.strip() for a in cargs[2].strip()[1:-1].split(",") if a.strip()]
        funcs[m.group(1)] = (len(params), cargs[1].strip(), argt)
    for m in re.finditer(r"^struct (\w+)\n(.*?)^end", lib_text, re.S | re.M):
        types[m.group(1)] = [f for f, _ in re.findall(r"^\s+(\w+)::(.+)$", m.group(2), re.M)]
    for m in re.finditer(r"^mutable struct (\w+) end", lib_text, re.M):
        types[m.group(1)] = None  # opaque
    consts = set(re.findall(r"^const (LLMT_\w+) =", lib_text, re.M))
    return funcs, types, consts


def norm(t):
    t = t.strip()
    for a, b in NORM.items():
        t = re.sub(r"\b%s\b" % a, b, t)
    return t.replace(" ", "")


def problems(lib_text, jl_text, test_text=""):
    funcs, types, consts = generated(lib_text)
    s = sanitize(jl_text)
    bad, seen = [], set()

    def line(pos):
        return s.count("\n", 0, pos) + 1

    # calls of generated functions / struct constructors
    for m in re.finditer(r"(?<![\w:])(?:LibLLMTrain\.)?(llmt_\w+)\s*(\()?", s):
        name, call = m.group(1), m.group(2)
        if name in funcs:
            seen.add(name)
            if call:
                args, _ = split_args(s, m.end() - 1)
                if len(args) != funcs[name][0]:
                    bad.append("line %d: %s called with %d arguments, generated takes %d"
                               % (line(m.start()), name, len(args), funcs[name][0]))
        elif name in types:
            if call and types[name] is not None:
                args, _ = split_args(s, m.end() - 1)
                if len(args) != len(types[name]):
                    bad.append("line %d: %s(...) with %d arguments, the struct has %d fields"
                               % (line(m.start()), name, len(args), len(types[name])))
        else:
            bad.append("line %d: %s is not in the generated layer" % (line(m.start()), name))
    # raw ccalls of library symbols: the generated types
    for m in re.finditer(r"ccall\(\(:(llmt_\w+),", s):
        name = m.group(1)
        args, _ = split_args(s, m.start() + len("ccall"))
        if name not in funcs:
            bad.append("line %d: ccall of %s: not generated" % (line(m.start()), name))
            continue
        _, ret, argt = funcs[name]
        mine_t = args[2].strip()
        mine = [a for a in re.sub(r"^\(|\)$", "", mine_t).split(",") if a.strip()] \
            if mine_t.startswith("(") else None
        if norm(args[1]) != norm(ret) or mine is None or \
                [norm(a) for a in mine] != [norm(a) for a in argt]:
            bad.append("line %d: ccall of %s as %s %s, generated %s (%s)"
                       % (line(m.start()), name, args[1], mine_t, ret, ", ".join(argt)))
    # constants
    for text, what in ((s, "LLMTrain.jl"), (sanitize(test_text), "job_test.jl")):
        for c in sorted(set(re.findall(r"\b(LLMT_[A-Z0-9_]+)\b", text))):
            if c not in consts:
                bad.append("%s: constant %s is not generated" % (what, c))
    # fields of option/result structs through typed variables, scoped to one
    # top-level definition (a line starting in column 0 starts a new one)
    vtype = {}
    rx = re.compile(r"^(?=\S)|(?<![\w.])(\w+)\s*=(?![=>])\s*(?:sized\((llmt_\w+)\)|Ref\((llmt_\w+)\("
                    r"|(\w+)\[\](?![\w.\[])|(Ref\{\w+\}\(\)))?"
                    r"|setf!\((\w+),\s*:(\w+)|(?<![\w.:])(\w+)(\[\])?\.(\w+)", re.M)
    for m in rx.finditer(s):
        if m.group(0) == "" and m.group(1) is None:
            vtype = {}
        elif m.group(1):
            t = m.group(2) or m.group(3) or vtype.get(m.group(4)) or ("*" if m.group(5) else None)
            if t:
                vtype[m.group(1)] = t
            else:
                vtype.pop(m.group(1), None)
        elif m.group(6):
            t = vtype.get(m.group(6))
            if t is None:
                bad.append("line %d: setf!(%s, :%s): %s is not from sized(...)"
                           % (line(m.start()), m.group(6), m.group(7), m.group(6)))
            elif t != "*" and m.group(7) not in (types.get(t) or []):
                bad.append("line %d: setf! of %s.%s: no such field" % (line(m.start()), t, m.group(7)))
        elif m.group(8):
            t = vtype.get(m.group(8))
            if t and t != "*" and types.get(t) is not None and m.group(10) not in types[t]:
                bad.append("line %d: %s%s.%s: %s has no field %s" % (
                    line(m.start()), m.group(8), m.group(9) or "", m.group(10), t, m.group(10)))
    return bad, seen


def main():
    src = sys.argv[1]
    jd = os.path.join(src, "bindings-template/julia")
    lib = open(os.path.join(jd, "src/LibLLMTrain.jl")).read()
    jl = open(os.path.join(jd, "LLMTrain.jl")).read()
    test = open(os.path.join(jd, "job_test.jl")).read()
    fails = 0

    def check(cond, what):
        nonlocal fails
        print(("ok   " if cond else "FAIL ") + what)
        fails += 0 if cond else 1

    bad, seen = problems(lib, jl, test)
    for b in bad:
        print("     " + b)
    check(not bad and len(seen) >= 60,
          "LLMTrain.jl: %d generated functions called, arity, fields, constants, ccall types"
          % len(seen))
    # the check itself: three planted mistakes are each found
    for old, new, why in (("llmt_trainer_step(tp, b, m)", "llmt_trainer_step(tp, b)", "arity"),
                          ("setf!(o, :micro_batch,", "setf!(o, :micro_batches,", "field"),
                          ("llmt_loader_next(", "llmt_loader_next_batch(", "unknown function")):
        check(old in jl and problems(lib, jl.replace(old, new, 1), test)[0] != [],
              "a planted %s mistake is found" % why)
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
