#!/usr/bin/python3
"""The peer of bench_ckpt: torch.save and torch.load of the same state (N
fp32 tensors, same total size) on the same disk. save = torch.save into a new
file + flush + fsync; load = drop the file's pages (posix_fadvise DONTNEED)
+ torch.load. Prints one JSON object with the seconds of every repeat.
usage: torch_peer.py DIR MIB TENSORS REPEATS"""
import json
import os
import sys
import time

try:
    import torch
except Exception:
    print("torch_peer: no torch", file=sys.stderr)
    sys.exit(77)

d, mib, nt, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
per = (mib << 20) // 4 // nt
torch.set_num_threads(1)
state = {"param/t%d" % i: (torch.arange(per, dtype=torch.float32) % 1000) * 0.5 + i
         for i in range(nt)}
nbytes = per * 4 * nt
path = os.path.join(d, "torch-peer-%d.pt" % os.getpid())
save, load = [], []
for r in range(reps + 1):  # the first round warms up
    if os.path.exists(path):
        os.unlink(path)  # untimed, like bench_ckpt's cleanup
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    t1 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY)
    os.fdatasync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    t2 = time.perf_counter()
    back = torch.load(path)
    t3 = time.perf_counter()
    assert all(torch.equal(back[k], v) for k, v in state.items())
    if r:
        save.append(t1 - t0)
        load.append(t3 - t2)
os.unlink(path)
print(json.dumps({"bytes": nbytes, "torch": torch.__version__, "save_s": save, "load_s": load}))
