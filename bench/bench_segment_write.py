#!/usr/bin/env python3
"""How fast a client writes 4 GiB of tensor bytes into a /dev/shm file, by each way it could.

    bench/bench_segment_write.py [THREADS]

Compares, on 4 GiB held by torch: mapping the file with MAP_POPULATE and copying on one
thread (how the Python client wrote uploads before issue 33), mapping a fallocated file and
copying from THREADS threads (with and without MAP_POPULATE, which maps the pages fallocate
made in one call instead of a fault per page), os.pwrite from THREADS threads with and without fallocate, and
os.pwrite from one thread; then torch's in-memory copy. ddod reserves an upload's pages with
fallocate (SegmentPages::kReserved) and the clients write with pwrite (segment_writer.py).
"""
import mmap, os, sys, time
from concurrent.futures import ThreadPoolExecutor
import torch
size = 4 << 30
src = torch.empty(size, dtype=torch.uint8).fill_(7)
T = int(sys.argv[1]) if len(sys.argv) > 1 else 8
piece = 64 << 20
def fresh(populate_kind):
    path = f"/dev/shm/ub-{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    os.unlink(path)
    os.ftruncate(fd, size)
    t = time.perf_counter()
    if populate_kind == "fallocate":
        os.posix_fallocate(fd, 0, size)
    return fd, time.perf_counter() - t
def run(label, kind, threads, how):
    fd, alloc = fresh(kind)
    t = time.perf_counter()
    if how == "pwrite":
        view = memoryview(src.numpy())
        def w(o):
            done = 0
            while done < piece:
                done += os.pwrite(fd, view[o + done:o + piece], o + done)
        with ThreadPoolExecutor(threads) as ex:
            list(ex.map(w, range(0, size, piece)))
    else:
        flags = mmap.MAP_SHARED | (0x8000 if how == "map-populate" else 0)
        m = mmap.mmap(fd, size, flags=flags, prot=mmap.PROT_READ | mmap.PROT_WRITE)
        def w(o):
            torch.frombuffer(m, dtype=torch.uint8, count=piece, offset=o).copy_(src[o:o + piece])
        if threads == 1:
            for o in range(0, size, piece): w(o)
        else:
            with ThreadPoolExecutor(threads) as ex:
                list(ex.map(w, range(0, size, piece)))
        del w
        import gc; gc.collect()
        try: m.close()
        except BufferError: pass
    s = time.perf_counter() - t
    os.close(fd)
    print(f"{label:55} alloc {alloc:6.3f} s  write {s:6.3f} s  {size / (s + alloc) / 1e9:6.2f} GB/s", flush=True)
print("torch threads", torch.get_num_threads())
for rep in range(2):
    run("today: ddod populates (not here), map POPULATE, 1 thread", "none", 1, "map-populate")
    run(f"fallocate, map, torch copy_ {T} threads", "fallocate", T, "map")
    run(f"fallocate, map POPULATE, torch copy_ {T} threads", "fallocate", T, "map-populate")
    run(f"fallocate, os.pwrite {T} threads", "fallocate", T, "pwrite")
    run(f"no fallocate, os.pwrite {T} threads", "none", T, "pwrite")
    run(f"fallocate, os.pwrite 1 thread", "fallocate", 1, "pwrite")
t = time.perf_counter(); dst = torch.empty_like(src); dst.copy_(src); t1 = time.perf_counter(); dst.copy_(src)
print(f"torch copy bound: first {size / (t1 - t) / 1e9:.2f} GB/s, faulted {size / (time.perf_counter() - t1) / 1e9:.2f} GB/s")
