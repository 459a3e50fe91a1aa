#!/usr/bin/env python3
"""The fp8 codecs of lib/exec/fp8.c against an independent reference.

The reference builds the E4M3 ("fn": bias 7, no infinities, S.1111.111 NaN)
and E5M2 (bias 15, IEEE-like) value tables from the format definition, by
enumerating sign, exponent and mantissa with exact fractions. Encoding is a
search for the nearest table value, ties to the even code, saturating at the
largest finite value (and +-inf) as the CUDA quantize kernel does
(__NV_SATFINITE), NaN -> 0x7F. No torch: Debian's torch has no float8.

usage: test_fp8_ref.py FP8_TOOL
"""
import bisect
import math
import random
import struct
import subprocess
import sys
from fractions import Fraction

FORMATS = {  # name: (exponent bits, mantissa bits, bias, ieee specials)
    0: ("E4M3", 4, 3, 7, False),
    1: ("E5M2", 5, 2, 15, True),
}


def code_value(code, ebits, mbits, bias, ieee):
    """The value of one code: a Fraction, or 'nan' / 'inf' / '-inf'."""
    sign = -1 if code & 0x80 else 1
    e = (code >> mbits) & ((1 << ebits) - 1)
    m = code & ((1 << mbits) - 1)
    etop = (1 << ebits) - 1
    if ieee and e == etop:
        return ("inf" if sign > 0 else "-inf") if m == 0 else "nan"
    if not ieee and e == etop and m == (1 << mbits) - 1:
        return "nan"
    if e == 0:  # subnormal: 0.m * 2^(1-bias)
        mag = Fraction(m, 1 << mbits) * Fraction(2) ** (1 - bias)
    else:
        mag = (1 + Fraction(m, 1 << mbits)) * Fraction(2) ** (e - bias)
    return sign * mag


class Table:
    def __init__(self, fmt):
        self.name, ebits, mbits, bias, ieee = FORMATS[fmt]
        self.values = [code_value(c, ebits, mbits, bias, ieee) for c in range(256)]
        pos = [(v, c) for c, v in enumerate(self.values)
               if c < 0x80 and isinstance(v, Fraction)]
        pos.sort()
        self.pos_vals = [v for v, _ in pos]
        self.pos_codes = [c for _, c in pos]
        self.max = self.pos_vals[-1]
        self.maxcode = self.pos_codes[-1]
        # The table must be strictly increasing in the code.
        assert self.pos_codes == list(range(len(self.pos_codes))), self.name

    def encode(self, x):
        if math.isnan(x):
            return 0x7F
        sign = 0x80 if math.copysign(1.0, x) < 0 else 0
        if math.isinf(x):
            return sign | self.maxcode
        a = abs(Fraction(x))
        if a >= self.max:
            return sign | self.maxcode
        i = bisect.bisect_right(self.pos_vals, a) - 1  # vals[i] <= a < vals[i+1]
        lo, hi = self.pos_vals[i], self.pos_vals[i + 1]
        clo, chi = self.pos_codes[i], self.pos_codes[i + 1]
        dlo, dhi = a - lo, hi - a
        if dlo < dhi:
            c = clo
        elif dhi < dlo:
            c = chi
        else:
            c = clo if clo % 2 == 0 else chi
        return sign | c


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def bits_f32(b):
    return struct.unpack("<f", struct.pack("<I", b & 0xFFFFFFFF))[0]


def inputs(tables, rnd):
    """fp32 bit patterns: every table value, the midpoints between
    neighbours and the floats just either side of them, specials, powers of
    two, then random floats."""
    out = set()
    for t in tables:
        for v in t.pos_vals:
            for s in (1, -1):
                out.add(f32_bits(s * float(v)))
        for lo, hi in zip(t.pos_vals, t.pos_vals[1:] + [t.max * 2]):
            mid = f32_bits(float((lo + hi) / 2))
            for d in (-1, 0, 1):
                out.add(mid + d)
                out.add((mid + d) | 0x80000000)
    out.update([0, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000,
                0x7F800001, 0x7FFFFFFF, 0x00000001, 0x80000001, 0x007FFFFF,
                0x7F7FFFFF, 0xFF7FFFFF])
    for e in range(-149, 128):
        out.add(f32_bits(math.ldexp(1.0, e)))
        out.add(f32_bits(-math.ldexp(1.0, e)))
    for _ in range(20000):  # any bit pattern
        out.add(rnd.getrandbits(32))
    for _ in range(40000):  # the range the formats cover, dense
        m = rnd.random() + 0.5
        e = rnd.randint(-20, 17)
        x = math.ldexp(m, e) * rnd.choice((1, -1))
        out.add(f32_bits(x))
    return sorted(out)


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    tool = sys.argv[1]
    tables = [Table(0), Table(1)]
    assert tables[0].max == 448 and tables[1].max == 57344
    failures = 0

    # Decode: every code of both formats, bit for bit (NaN codes only need
    # to be NaN).
    dec = subprocess.run([tool, "decode"], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    ndec = 0
    for line in dec:
        if not line:
            continue
        f, c, b = line.split()
        f, c, b = int(f), int(c, 16), int(b, 16)
        got = bits_f32(b)
        want = tables[f].values[c]
        ndec += 1
        if want == "nan":
            ok = math.isnan(got)
        elif want in ("inf", "-inf"):
            ok = got == float(want)
        else:
            w = float(want)
            if want == 0 and c & 0x80:
                w = -0.0
            ok = f32_bits(w) == b
        if not ok:
            failures += 1
            if failures < 20:
                print(f"decode {tables[f].name} {c:#04x}: got {got!r}, "
                      f"want {want}", file=sys.stderr)
    assert ndec == 512, ndec

    # Encode.
    rnd = random.Random(20240817)
    xs = inputs(tables, rnd)
    text = "".join(f"{b:08x}\n" for b in xs)
    enc = subprocess.run([tool, "encode"], input=text, capture_output=True,
                         text=True, check=True).stdout.split("\n")
    enc = [l for l in enc if l]
    assert len(enc) == len(xs), (len(enc), len(xs))
    for b, line in zip(xs, enc):
        x = bits_f32(b)
        got = [int(v, 16) for v in line.split()]
        for f in (0, 1):
            want = tables[f].encode(x)
            if got[f] != want:
                failures += 1
                if failures < 20:
                    print(f"encode {tables[f].name} {x!r} (bits {b:08x}): "
                          f"got {got[f]:#04x}, want {want:#04x}",
                          file=sys.stderr)
    print(f"fp8-python-ref: 512 decodes, {len(xs)} inputs x 2 formats "
          f"encoded, {failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
