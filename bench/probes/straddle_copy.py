#!/usr/bin/env python3
"""Probe: is a host-to-device copy whose source spans two cudaHostRegister registrations of one
mapping as fast (and as correct) as one within a registration? Decides whether ddod may pin its
pre-faulted reserve in fixed parts ahead of the layout (issue 33).

    python3 bench/probes/straddle_copy.py
"""
import ctypes, mmap, os, time
import torch

cudart = torch.cuda.cudart()
torch.cuda.init()
size = 2 << 30
half = size // 2
fd = os.open(f"/dev/shm/straddle-{os.getpid()}", os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.unlink(f"/dev/shm/straddle-{os.getpid()}")
os.ftruncate(fd, size)
m = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | 0x8000)
host = torch.frombuffer(m, dtype=torch.uint8)
host.copy_(torch.randint(0, 255, (size,), dtype=torch.uint8))
base = host.data_ptr()
lib = ctypes.CDLL("libcudart.so") if False else None
def reg(off, n):
    rc = cudart.cudaHostRegister(base + off, n, 1)
    assert int(rc) == 0, rc
reg(0, half); reg(half, half)
piece = 256 << 20
dev = torch.empty(piece, dtype=torch.uint8, device="cuda")
s = torch.cuda.Stream()
def timed(off, label):
    src = host[off:off + piece]
    best = 1e9
    for _ in range(5):
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.cuda.stream(s):
            dev.copy_(src, non_blocking=True)
        s.synchronize()
        best = min(best, time.perf_counter() - t)
    ok = torch.equal(dev.cpu(), src)
    print(f"{label:45} {piece / best / 1e9:7.2f} GB/s  equal={ok}", flush=True)
timed(0, "within the first registration")
timed(half - piece // 2, "straddling the two registrations")
timed(half, "within the second registration")
cudart.cudaHostUnregister(base); cudart.cudaHostUnregister(base + half)
timed(0, "unregistered (pageable)")
