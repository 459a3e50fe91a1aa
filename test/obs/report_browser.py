#!/usr/bin/env python3
"""llmtrain report in a real browser (issue 20): train a tiny model for a
few steps, write its report, then have Debian's chromium (headless) render
it: the page must log nothing to the console, every series must be laid
out with a non-empty box (checked by a script the browser runs on a copy
of the page), and the screenshot must show the plot colours.

  report_browser.py LLMTRAIN CORPUS_DIR

Exit 77 (SKIP) when chromium is absent.
"""
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib

W, H = 1000, 2400


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        p = shutil.which(name)
        if p:
            return p
    return None


def browse(exe, url, tmp, *extra):
    """Run headless chromium on url; (stdout, stderr)."""
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
           "--user-data-dir=" + os.path.join(tmp, "profile"), "--enable-logging=stderr",
           "--v=0", "--virtual-time-budget=3000", "--window-size=%d,%d" % (W, H)]
    r = subprocess.run(cmd + list(extra) + [url], capture_output=True, text=True, errors="replace", timeout=120)
    return r.stdout, r.stderr


def console(stderr):
    """Console messages and uncaught errors, as chromium logs them."""
    return [l for l in stderr.splitlines() if ":CONSOLE" in l or "Uncaught" in l]


def png_pixels(path):
    """(width, height, rows of RGBA bytes) of an 8-bit RGB(A) PNG."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype = struct.unpack(">IIBB", body[:10])
            if depth != 8 or ctype not in (2, 6):
                raise ValueError("PNG depth %d colour type %d" % (depth, ctype))
            bpp = 4 if ctype == 6 else 3
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw, stride = zlib.decompress(idat), w * bpp
    rows, prev = [], bytearray(stride)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if f == 1:
            for i in range(bpp, stride):
                line[i] = (line[i] + line[i - bpp]) & 255
        elif f == 2:
            line = bytearray((a + b) & 255 for a, b in zip(line, prev))
        elif f == 3:
            for i in range(stride):
                left = line[i - bpp] if i >= bpp else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 255
        elif f == 4:
            for i in range(stride):
                a = line[i - bpp] if i >= bpp else 0
                b, c = prev[i], prev[i - bpp] if i >= bpp else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return w, h, bpp, rows


# A copy of the page with this script appended reports what the browser
# laid out: per plot, its box and the boxes of its marks.
PROBE = """<script>
(function () {
  var out = {};
  function box(e) { var b = e.getBBox ? e.getBBox() : e.getBoundingClientRect();
                    return b.width > 0 || b.height > 0; }
  document.querySelectorAll('svg.plot').forEach(function (s) {
    var r = s.getBoundingClientRect();
    out[s.id] = {w: r.width, h: r.height, series: {}, cells: 0, bars: 0, events: 0};
    s.querySelectorAll('polyline.series').forEach(function (p) {
      out[s.id].series[p.getAttribute('data-name')] = box(p) ? p.points.numberOfItems : 0; });
    s.querySelectorAll('rect.cell').forEach(function (c) { if (box(c)) out[s.id].cells++; });
    s.querySelectorAll('rect.bar').forEach(function (c) { if (box(c)) out[s.id].bars++; });
    s.querySelectorAll('line.event').forEach(function (c) { out[s.id].events++; });
  });
  out.event_items = document.querySelectorAll('#events li').length;
  out.plan_rows = document.querySelectorAll('#plan-vs-measured tr').length;
  var pre = document.createElement('pre');
  pre.id = 'llmt-probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
</script>"""

fails = 0


def check(ok, what):
    global fails
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        fails += 1


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    cli, corpus = sys.argv[1], sys.argv[2]
    exe = chromium()
    if not exe:
        print("SKIP: chromium is not installed (Debian: apt-get install chromium)")
        return 77
    tmp = tempfile.mkdtemp(prefix="llmt-report-")
    try:
        return run(cli, corpus, exe, tmp)
    finally:
        if fails == 0:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("kept", tmp)


def run(cli, corpus, exe, tmp):
    spec = {"name": "report", "model": {"arch": "gpt2", "layers": 2, "hidden": 64,
                                        "heads": 4, "ffn": 256, "vocab": 320, "seq_len": 64},
            "batch": {"micro": 2, "grad_accum": 1}, "optimizer": {"lr": 1e-3},
            "train": {"steps": 8, "seed": 3, "eval_interval": 3, "eval_batches": 1,
                      "threads": 1},
            "data": {"train": corpus, "tokenizer": {"kind": "byte"}},
            "checkpoint": {"interval": 4}, "hardware": {"gpu": "cpu"}}
    with open(os.path.join(tmp, "spec.json"), "w") as f:
        json.dump(spec, f)
    rd = os.path.join(tmp, "run")
    r = subprocess.run([cli, "train", os.path.join(tmp, "spec.json"), "--out", rd],
                       capture_output=True, text=True, errors="replace", timeout=300)
    check(r.returncode == 0, "llmtrain train (rc %d) %s" % (r.returncode, r.stderr[-500:]))
    r = subprocess.run([cli, "report", rd], capture_output=True, text=True, errors="replace", timeout=60)
    page = os.path.join(rd, "report.html")
    check(r.returncode == 0 and os.path.exists(page), "llmtrain report: " + r.stdout.strip())
    if fails:
        return 1

    # the detector itself: a page that errors must be caught
    bad = os.path.join(tmp, "bad.html")
    with open(bad, "w") as f:
        f.write("<html><body><script>throw new Error('llmt-probe-throw')</script></body></html>")
    _, err = browse(exe, "file://" + bad, tmp, "--dump-dom")
    check(any("llmt-probe-throw" in l for l in console(err)),
          "a page that throws shows in chromium's console log")

    # the report itself: no console output, a screenshot
    shot = os.path.join(rd, "report.png")
    _, err = browse(exe, "file://" + page, tmp, "--screenshot=" + shot)
    msgs = console(err)
    check(not msgs, "report.html: no console messages %s" % msgs[:5])
    check(os.path.exists(shot), "screenshot written: " + shot)

    # what the browser laid out
    with open(page) as f:
        html = f.read()
    probed = os.path.join(tmp, "probed.html")
    with open(probed, "w") as f:
        f.write(html.replace("</body>", PROBE + "</body>"))
    dom, err = browse(exe, "file://" + probed, tmp, "--dump-dom")
    check(not console(err), "probe page: no console messages %s" % console(err)[:5])
    m = re.search(r'<pre id="llmt-probe">(.*?)</pre>', dom, re.S)
    check(m is not None, "the probe ran in the browser")
    if not m:
        return 1
    out = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    print(json.dumps(out))
    steps = spec["train"]["steps"]
    for plot, names in (("loss", ("loss", "val_loss")), ("mfu", ("mfu",)),
                        ("tokens", ("tokens_per_s",))):
        p = out.get(plot, {})
        check(p.get("w", 0) > 100 and p.get("h", 0) > 50, "plot %s laid out %sx%s"
              % (plot, p.get("w"), p.get("h")))
        for n in names:
            pts = p.get("series", {}).get(n, 0)
            check(pts >= 2, "plot %s: series %s drawn with %d points" % (plot, n, pts))
        check(p.get("events", 0) >= 1, "plot %s: events on the time axis (%d)"
              % (plot, p.get("events", 0)))
    check(out.get("loss", {}).get("series", {}).get("loss", 0) == steps,
          "loss has a point per step (%d)" % steps)
    hm = out.get("heatmap", {})
    check(hm.get("cells", 0) == steps, "heatmap: a cell per step of rank 0 (%d)"
          % hm.get("cells", 0))
    bars = [v for k, v in out.items() if isinstance(v, dict) and v.get("bars")]
    check(bars and bars[0]["bars"] >= steps, "time split: stacked bars (%d)"
          % (bars[0]["bars"] if bars else 0))
    check(out.get("event_items", 0) >= 3, "events list: start and checkpoints (%d)"
          % out.get("event_items", 0))
    check(out.get("plan_rows", 0) >= 4, "planner vs measured table (%d rows)"
          % out.get("plan_rows", 0))

    # the screenshot is not blank: the series' colours are painted
    w, h, bpp, rows = png_pixels(shot)
    check((w, h) == (W, H), "screenshot %dx%d" % (w, h))
    want = {"loss #4e79a7": (0x4e, 0x79, 0xa7), "val_loss #e15759": (0xe1, 0x57, 0x59),
            "mfu #59a14f": (0x59, 0xa1, 0x4f), "tokens/s #f28e2b": (0xf2, 0x8e, 0x2b)}
    counts = dict.fromkeys(want, 0)
    nonwhite = 0
    for row in rows:
        for x in range(0, len(row), bpp):
            px = (row[x], row[x + 1], row[x + 2])
            if px != (255, 255, 255):
                nonwhite += 1
                for k, c in want.items():
                    if all(abs(a - b) <= 6 for a, b in zip(px, c)):
                        counts[k] += 1
    check(nonwhite > w * h // 50, "screenshot not blank: %d non-white pixels" % nonwhite)
    for k, n in counts.items():
        check(n >= 20, "screenshot shows %s (%d pixels)" % (k, n))
    print("report_browser: %s (%d failed)" % ("ok" if not fails else "FAIL", fails))
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
