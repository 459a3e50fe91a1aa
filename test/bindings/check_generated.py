#!/usr/bin/env python3
"""The generated FFI layers against C (issue 21), everywhere (no toolchain
needed): every public struct's size and field offsets as the Python
ctypes Structures give them, and as the generated Julia structs, Go table
and Rust table declare them (parsed from the files), equal the output of
test/bindings/layout_ref.c; the generated files are up to date with the
header (tools/gen_bindings.py --check); changing a function in a copy
of the header makes that check fail; and the Julia idiomatic layer calls
the generated one with the right arities and fields (check_julia_calls.py).
usage: check_generated.py SOURCE_ROOT LAYOUT_REF_EXE"""
import ctypes
import os
import re
import subprocess
import sys
import tempfile

src, ref_exe = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(src, "bindings-template/python"))
from llmtrain import _ffi  # noqa: E402

fails = 0


def check(cond, what):
    global fails
    print(("ok   " if cond else "FAIL ") + what)
    fails += 0 if cond else 1


ref = subprocess.run([ref_exe], capture_output=True, text=True, check=True).stdout.splitlines()
nstruct = sum(1 for line in ref if "." not in line.split()[0])

# Python: the ctypes classes themselves
mine = []
for name, (cls, _) in _ffi.STRUCTS.items():
    mine.append("%s %d" % (name, ctypes.sizeof(cls)))
    mine += ["%s.%s %d" % (name, f, getattr(cls, f).offset) for f, _ in cls._fields_]
check(mine == ref, "python ctypes: %d structs, %d fields equal C" % (nstruct, len(ref) - nstruct))

# Julia: parse the generated structs, lay them out by C's rules
JL = {"Int8": 1, "UInt8": 1, "Int16": 2, "UInt16": 2, "Int32": 4, "UInt32": 4, "Cint": 4,
      "Cuint": 4, "Float32": 4, "Int64": 8, "UInt64": 8, "Float64": 8, "Csize_t": 8}
text = open(os.path.join(src, "bindings-template/julia/src/LibLLMTrain.jl")).read()
structs = {}
for m in re.finditer(r"^struct (\w+)\n(.*?)^end", text, re.S | re.M):
    structs[m.group(1)] = re.findall(r"^\s+(\w+)::(.+)$", m.group(2), re.M)


def jl_layout(t):
    m = re.fullmatch(r"NTuple\{(\d+), (.+)\}", t)
    if m:
        s, a = jl_layout(m.group(2))
        return s * int(m.group(1)), a
    if t.startswith("Ptr{"):
        return 8, 8
    if t in structs:
        size, align, _ = jl_struct(t)
        return size, align
    return JL[t], JL[t]


def jl_struct(name):
    off, align, offs = 0, 1, []
    for f, t in structs[name]:
        s, a = jl_layout(t)
        off = (off + a - 1) // a * a
        offs.append((f.rstrip("_") if f.rstrip("_") in ("end", "type") else f, off))
        off += s
        align = max(align, a)
    return (off + align - 1) // align * align, align, offs


jl = []
for name in structs:
    size, _, offs = jl_struct(name)
    jl.append("%s %d" % (name, size))
    jl += ["%s.%s %d" % (name, f, o) for f, o in offs]
check(jl == ref, "julia isbits structs (parsed): layout equals C")

# Go and Rust: the generated tables
for path, rx in (("bindings-template/go/zz_generated.go",
                  r'\{"(\w+)", -?\d+, (\d+), \[\]fieldOffset\{(.*)\}\},'),
                 ("bindings-template/rust/src/sys.rs",
                  r'\("(\w+)", -?\d+, (\d+), &\[(.*)\]\),')):
    tab = []
    for m in re.finditer(rx, open(os.path.join(src, path)).read()):
        tab.append("%s %s" % (m.group(1), m.group(2)))
        tab += ["%s.%s %s" % (m.group(1), f, o)
                for f, o in re.findall(r'[{(]"(\w+)", (\d+)[})]', m.group(3))]
    check(tab == ref, "%s: layout table equals C" % path)

# staleness
gen = os.path.join(src, "tools/gen_bindings.py")
r = subprocess.run([sys.executable, gen, "--check"], capture_output=True, text=True)
check(r.returncode == 0, "generated files up to date with include/llmtrain.h" +
      ("" if r.returncode == 0 else ":\n" + r.stdout[-3000:]))
with tempfile.TemporaryDirectory() as d:
    h = open(os.path.join(src, "include/llmtrain.h")).read()
    h2 = h.replace("LLMT_API uint32_t llmt_abi_version(void);",
                   "LLMT_API uint32_t llmt_abi_version(int32_t which);")
    check(h2 != h, "test header edited")
    open(os.path.join(d, "h.h"), "w").write(h2)
    r = subprocess.run([sys.executable, gen, "--check", "--header", os.path.join(d, "h.h")],
                       capture_output=True, text=True)
    check(r.returncode == 1 and "llmt_abi_version" in r.stdout,
          "a changed function without regenerating fails the check")

# the Julia idiomatic layer (never run here: no julia) against the generated
# one: every generated function it calls exists with that number of
# arguments, every option field it sets exists (check_julia_calls.py)
r = subprocess.run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                 "check_julia_calls.py"), src],
                   capture_output=True, text=True)
print(r.stdout + r.stderr, end="")
check(r.returncode == 0, "julia: LLMTrain.jl's calls, fields and constants match LibLLMTrain.jl")
sys.exit(1 if fails else 0)
