"""How fast ddod can copy one /dev/shm segment into another (issue 31: the upload is copied at
commit): copy_file_range against pread into a mapping populated first (MADV_POPULATE_WRITE),
with 1 and N threads, on a GiB-sized pair of segments. A probe for choosing
ComponentStore::CopyUpload's method.

    python3 bench/probes/shm_copy_rates.py --gib 4 --threads 1,16
"""

from __future__ import annotations

import argparse
import mmap
import os
import threading
import time

CHUNK = 32 << 20
MADV_POPULATE_WRITE = 23


def make_source(path: str, size: int) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.ftruncate(fd, size)
    block = os.urandom(1 << 20)
    for offset in range(0, size, 1 << 20):
        os.pwrite(fd, block, offset)
    return fd


def run(method: str, source: int, size: int, threads: int) -> float:
    path = f"/dev/shm/ddo-copy-probe-{os.getpid()}-dst"
    destination = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    os.ftruncate(destination, size)
    mapping = mmap.mmap(destination, size)
    view = memoryview(mapping)
    chunks = list(range(0, size, CHUNK))
    lock = threading.Lock()

    def work() -> None:
        while True:
            with lock:
                if not chunks:
                    return
                offset = chunks.pop()
            length = min(CHUNK, size - offset)
            if method == "copy_file_range":
                done = 0
                while done < length:
                    done += os.copy_file_range(source, destination, length - done,
                                               offset + done, offset + done)
            else:
                mapping.madvise(MADV_POPULATE_WRITE, offset, length)
                os.preadv(source, [view[offset:offset + length]], offset)

    started = time.perf_counter()
    pool = [threading.Thread(target=work) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    seconds = time.perf_counter() - started
    view.release()
    mapping.close()
    os.close(destination)
    os.unlink(path)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--gib", type=float, default=4)
    parser.add_argument("--threads", default="1,16")
    args = parser.parse_args()
    size = int(args.gib * (1 << 30))
    path = f"/dev/shm/ddo-copy-probe-{os.getpid()}-src"
    source = make_source(path, size)
    try:
        for threads in (int(t) for t in args.threads.split(",")):
            for method in ("copy_file_range", "populate+pread"):
                seconds = run(method, source, size, threads)
                print(f"{method:16s} {threads:3d} threads: {args.gib:g} GiB in {seconds:.2f} s "
                      f"({size / seconds / 1e9:.1f} GB/s)", flush=True)
    finally:
        os.close(source)
        os.unlink(path)


if __name__ == "__main__":
    main()
