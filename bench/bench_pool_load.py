#!/usr/bin/env python3
"""Cold load of a large safetensors file into ddod's host pool, against the anchor.

Measured in one run, on one file (page cache warm):
  * ddod: LoadSafetensors (parallel positional reads straight into the shared-memory pool,
    then page-locking when CUDA is usable), as a client sees it;
  * anchor: safetensors.torch.load_file() followed by pin_memory() of every tensor (the pin
    only where CUDA is available), which is what a runner does today;
  * bound: one large in-memory copy (torch), the speed of moving bytes at all;
  * warm attach: a fresh Python process that imports the client, connects and attaches the
    component (zero-copy views of every tensor), from process start to done;
  * --register: register_state_dict() of as many bytes held in this process (what a seed
    runner's enable_offload does), against the same copy bound;
  * --cold: the load again with the file dropped from the page cache first
    (posix_fadvise DONTNEED: no root needed), against the disk's sequential read bandwidth
    measured right after the same drop (dd iflag=direct, 64 MiB blocks).

    bench/bench_pool_load.py --ddod build/bin/ddod [--size-gb 4] [--register] [--cold]

ddod keeps a pre-faulted reserve (--prefaulted-reserve-gb, default here: the file's size) and
each timed load or registration starts once the reserve is ready, as it is for a service that
has been up a few seconds; --reserve-gb 0 measures without one.

The issue-33 goals are printed with the figures: warm >= 4x the anchor and >= 40% of the copy
bound; register >= 40% of the copy bound; cold >= 90% of the disk.

Prints a table and writes the figures as JSON (--json).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "client-python" / "src"))

from diffusers_dynamic_offloader import DdoClient  # noqa: E402

TENSOR_BYTES = 64 << 20  # 64 MiB per tensor, bf16


def write_safetensors(path: Path, size_bytes: int) -> int:
    """Writes a bf16 safetensors file of about size_bytes; returns the tensor bytes."""
    count = max(1, size_bytes // TENSOR_BYTES)
    elements = TENSOR_BYTES // 2
    header = {}
    offset = 0
    for i in range(count):
        header[f"blocks.{i}.weight"] = {
            "dtype": "BF16",
            "shape": [elements // 4096, 4096],
            "data_offsets": [offset, offset + TENSOR_BYTES],
        }
        offset += TENSOR_BYTES
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    generator = torch.Generator().manual_seed(0)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for _ in range(count):
            chunk = torch.randint(0, 256, (TENSOR_BYTES,), dtype=torch.uint8, generator=generator)
            out.write(chunk.numpy().tobytes())
    return offset


def drop_page_cache(path: Path) -> None:
    """Drops the file's pages from the page cache (clean pages only: the file is synced)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def disk_read_gbps(path: Path) -> dict:
    """Sequential O_DIRECT read of the file with dd, after dropping it from the page cache."""
    drop_page_cache(path)
    started = time.perf_counter()
    done = subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=64M", "iflag=direct"],
                          capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        return {"available": False, "why": done.stderr.strip()[-200:]}
    return {"available": True, "seconds": seconds, "gbps": path.stat().st_size / seconds / 1e9}


def register_figures(client: DdoClient, size_bytes: int, streams: Optional[str] = None) -> dict:
    """register_state_dict of size_bytes of bf16 tensors held by this process, timed;
    ``streams``: DDO_UPLOAD_STREAMS for the call (None: the client's default, streamed; "0":
    through a segment, copied at commit)."""
    count = max(1, size_bytes // TENSOR_BYTES)
    state = {f"blocks.{i}.weight": torch.full((TENSOR_BYTES,), i % 251, dtype=torch.uint8)
             .view(torch.bfloat16).view(-1, 4096) for i in range(count)}
    saved = os.environ.get("DDO_UPLOAD_STREAMS")
    if streams is not None:
        os.environ["DDO_UPLOAD_STREAMS"] = streams
    try:
        started = time.perf_counter()
        client.register_state_dict("bench/registered", state, progress=False)
        seconds = time.perf_counter() - started
    finally:
        if saved is None:
            os.environ.pop("DDO_UPLOAD_STREAMS", None)
        else:
            os.environ["DDO_UPLOAD_STREAMS"] = saved
    client.evict("bench/registered")
    return {"seconds": seconds, "gbps": count * TENSOR_BYTES / seconds / 1e9,
            "streams": streams or "default"}


def wait_for_reserve(client: DdoClient, needed: int, timeout: float = 120.0) -> float:
    """Waits until ddod's pre-faulted reserve holds `needed` bytes ready; returns the wait."""
    started = time.perf_counter()
    while needed > 0 and client.stats().pool.prefaulted_ready_bytes < needed:
        if time.perf_counter() - started > timeout:
            raise RuntimeError(f"ddod's pre-faulted reserve was not ready in {timeout:.0f} s")
        time.sleep(0.05)
    return time.perf_counter() - started


def timed_load(client: DdoClient, key: str, path: Path) -> float:
    started = time.perf_counter()
    client.load_safetensors(key, [path], progress=False)
    return time.perf_counter() - started


def warm_page_cache(path: Path) -> None:
    with open(path, "rb") as source:
        while source.read(64 << 20):
            pass


def copy_bound_gbps(size_bytes: int) -> float:
    source = torch.empty(size_bytes, dtype=torch.uint8).fill_(1)
    target = torch.empty_like(source)
    target.copy_(source)  # fault the pages in first
    started = time.perf_counter()
    target.copy_(source)
    return size_bytes / (time.perf_counter() - started) / 1e9


def anchor(path: Path) -> dict:
    try:
        from safetensors.torch import load_file
    except ImportError:
        return plain_read_anchor(path)
    started = time.perf_counter()
    state = load_file(str(path))
    loaded = time.perf_counter()
    pinned = False
    if torch.cuda.is_available():
        state = {name: tensor.pin_memory() for name, tensor in state.items()}
        pinned = True
    done = time.perf_counter()
    del state
    return {
        "available": True,
        "load_s": loaded - started,
        "pin_s": done - loaded,
        "total_s": done - started,
        "pinned": pinned,
    }


def plain_read_anchor(path: Path) -> dict:
    """Where the safetensors package is missing: read the file into private memory with
    Python, the least any runner must do (no parsing, no pinning)."""
    started = time.perf_counter()
    with open(path, "rb") as source:
        data = bytearray(path.stat().st_size)
        view = memoryview(data)
        done = 0
        while done < len(data):
            done += source.readinto(view[done:done + (64 << 20)])
    tensor = torch.frombuffer(data, dtype=torch.uint8)
    elapsed = time.perf_counter() - started
    del tensor, view, data
    return {"available": True, "label": "python readinto (no safetensors here)",
            "load_s": elapsed, "pin_s": 0.0, "total_s": elapsed, "pinned": False}


ATTACH_CHILD = r"""
import time
started = time.perf_counter()
import json, sys
import torch
torch_imported = time.perf_counter()
sys.path.insert(0, sys.argv[1])
from diffusers_dynamic_offloader import DdoClient
imported = time.perf_counter()
client = DdoClient.connect()
connected = time.perf_counter()
attached = client.attach(sys.argv[2])
checksum = sum(float(t.view(-1)[0].float()) for t in attached.tensors.values())
done = time.perf_counter()
print(json.dumps({"torch_import_s": torch_imported - started,
                  "import_s": imported - torch_imported, "connect_s": connected - imported,
                  "attach_s": done - connected, "tensors": len(attached.tensors)}))
attached.close()
client.close()
"""


def warm_attach(address: str, key: str, runs: int) -> dict:
    results = []
    env = dict(os.environ, DDO_DAEMON=address)
    for _ in range(runs):
        started = time.perf_counter()
        child = subprocess.run(
            [sys.executable, "-c", ATTACH_CHILD, str(REPO / "client-python" / "src"), key],
            env=env, check=True, capture_output=True, text=True)
        wall = time.perf_counter() - started
        figures = json.loads(child.stdout.strip().splitlines()[-1])
        figures["process_wall_s"] = wall
        results.append(figures)
    return {name: statistics.median(r[name] for r in results) for name in results[0]}


def print_goals(figures: dict) -> None:
    """The issue-33 goals, each with the figures it compares."""
    gb = figures["file_bytes"] / 1e9
    bound = figures["copy_bound_gbps"]
    ddo = figures["ddo"]["gbps"]
    anchor_figures = figures["anchor"]
    lines = [f"warm load {ddo:.2f} GB/s = {ddo / bound:.0%} of the copy bound (goal >= 40%)"]
    if anchor_figures.get("available") and anchor_figures.get("pinned"):
        ratio = anchor_figures["total_s"] / figures["ddo"]["seconds"]
        lines.append(f"warm load {ratio:.2f}x load_file + pin_memory (goal >= 4x)")
    if figures["register"] is not None:
        rate = figures["register"]["gbps"]
        lines.append(f"register_state_dict {figures['register']['seconds']:.2f} s, {rate:.2f} GB/s"
                     f" = {rate / bound:.0%} of the copy bound (goal >= 40%; streamed)")
    if figures.get("register_segment") is not None:
        segment = figures["register_segment"]
        lines.append(f"register_state_dict through a segment {segment['seconds']:.2f} s, "
                     f"{segment['gbps']:.2f} GB/s = {segment['gbps'] / bound:.0%} of the copy "
                     f"bound (the route before streams)")
    if figures["cold"] is not None:
        cold = figures["cold"]
        disk = cold["disk"]
        text = f"cold load {cold['seconds']:.2f} s, {gb / cold['seconds']:.2f} GB/s"
        if disk.get("available"):
            text += (f" = {cold['gbps'] / disk['gbps']:.0%} of the disk's {disk['gbps']:.2f} GB/s"
                     " (dd iflag=direct; goal >= 90%)")
        else:
            text += f" (no disk figure: {disk['why']})"
        lines.append(text)
    for line in lines:
        print(f"goal: {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ddod", required=True, help="the ddod binary")
    parser.add_argument("--size-gb", type=float, default=4.0, help="file size in GiB (4)")
    parser.add_argument("--dir", default="", help="where the file and socket go (a temp dir)")
    parser.add_argument("--runs", type=int, default=3, help="warm attach runs (median)")
    parser.add_argument("--json", default="", help="also write the figures here")
    parser.add_argument("--register", action="store_true",
                        help="also time register_state_dict of as many bytes")
    parser.add_argument("--cold", action="store_true",
                        help="also time a load with the file out of the page cache, and dd")
    parser.add_argument("--reserve-gb", type=float, default=-1.0,
                        help="ddod's --prefaulted-reserve-gb (default: the file's size; 0: none)")
    args = parser.parse_args()

    work = Path(args.dir or tempfile.mkdtemp(prefix="ddo-bench-", dir="/tmp"))
    work.mkdir(parents=True, exist_ok=True)
    path = work / "model.safetensors"
    size = int(args.size_gb * (1 << 30))
    if not path.exists() or path.stat().st_size < size:
        print(f"writing {path} ({args.size_gb:g} GiB)...", flush=True)
        write_safetensors(path, size)
    tensor_bytes = path.stat().st_size
    warm_page_cache(path)

    socket = work / "ddod.sock"
    budget = 2 * args.size_gb + 2  # one component at a time, plus the anchor's room
    reserve_gb = args.size_gb + 0.01 if args.reserve_gb < 0 else args.reserve_gb
    needed = tensor_bytes if reserve_gb > 0 else 0
    ddod_log = open(work / "ddod.log", "w")
    ddod = subprocess.Popen([args.ddod, "--preset", "warm_process", "--socket", str(socket),
                             "--state-dir", str(work / "state"), "--discard",
                             "--ram-budget-gb", f"{budget:g}",
                             "--prefaulted-reserve-gb", f"{reserve_gb:g}"],
                            stdout=ddod_log, stderr=subprocess.STDOUT)
    try:
        for _ in range(200):
            if socket.exists():
                break
            time.sleep(0.05)
        address = f"unix:{socket}"
        client = DdoClient.connect(address, timeout=600)
        info = client.info()
        cold = None
        reserve_waits = [wait_for_reserve(client, needed)]  # ddod's start: the first one made
        if args.cold:
            drop_page_cache(path)
            cold = {"seconds": timed_load(client, "bench/cold", path)}
            client.evict("bench/cold")
            warm_page_cache(path)
            reserve_waits.append(wait_for_reserve(client, needed))
        ddo_s = timed_load(client, "bench/model", path)
        pinned = client.stats().pool.pinned_bytes > 0
        attach = warm_attach(address, "bench/model", args.runs)
        registered = registered_segment = None
        if args.register:
            client.evict("bench/model")
            reserve_waits.append(wait_for_reserve(client, needed))
            registered = register_figures(client, tensor_bytes)
            # The segment route (the upload copied at commit), for the same bytes.
            reserve_waits.append(wait_for_reserve(client, needed))
            registered_segment = register_figures(client, tensor_bytes, streams="0")
        client.close()
    finally:
        ddod.terminate()
        ddod.wait(30)
        ddod_log.close()
    # ddod's own account of the load: segment, read and pin times.
    phases = [line.split(" store: ", 1)[1].strip()
              for line in (work / "ddod.log").read_text().splitlines()
              if " store: " in line and ("bench/model" in line or "bench/cold" in line)]

    anchor_figures = anchor(path)
    bound = copy_bound_gbps(min(tensor_bytes, 2 << 30))
    gb = tensor_bytes / 1e9
    if cold is not None:
        cold["gbps"] = gb / cold["seconds"]
        cold["disk"] = disk_read_gbps(path)
    figures = {
        "machine": {"cpus": os.cpu_count(), "backend": info.backend_detail,
                    "torch": torch.__version__, "python": sys.version.split()[0]},
        "prefaulted_reserve_gb": reserve_gb,
        "reserve_waits_s": reserve_waits,
        "file_bytes": tensor_bytes,
        "ddo": {"seconds": ddo_s, "gbps": gb / ddo_s, "pinned": pinned},
        "anchor": anchor_figures,
        "copy_bound_gbps": bound,
        "warm_attach": attach,
        "ddod_log": phases,
        "register": registered,
        "register_segment": registered_segment,
        "cold": cold,
    }
    print()
    print(f"file: {tensor_bytes / (1 << 30):.2f} GiB, page cache warm; {info.backend_detail}")
    print(f"pre-faulted reserve: {reserve_gb:g} GiB" + (
        f" (ready {reserve_waits[0]:.1f} s after ddod's start; waits before each timed step "
        f"{', '.join(f'{w:.1f}' for w in reserve_waits[1:])} s)" if needed else " (none)"))
    print(f"{'':34} {'seconds':>8} {'GB/s':>7}")
    print(f"{'ddod LoadSafetensors':34} {ddo_s:8.2f} {gb / ddo_s:7.2f}"
          f"   {'pinned' if pinned else 'not pinned (no CUDA)'}")
    if anchor_figures["available"]:
        a = anchor_figures
        label = a.get("label") or ("safetensors load_file + pin_memory" if a["pinned"]
                                   else "safetensors load_file")
        print(f"{label:34} {a['total_s']:8.2f} {gb / a['total_s']:7.2f}"
              f"   (load {a['load_s']:.2f} s, pin {a['pin_s']:.2f} s)")
        print(f"{'ratio (anchor / ddod time)':34} {a['total_s'] / ddo_s:8.2f}x")
    else:
        print(f"anchor: {anchor_figures['why']}")
    print(f"{'bound: in-memory copy (torch)':34} {'':8} {bound:7.2f}")
    for line in phases:
        print(f"  ddod: {line}")
    print_goals(figures)
    print(f"warm attach, fresh process (median of {args.runs}): "
          f"{attach['process_wall_s']:.3f} s wall: import torch {attach['torch_import_s']:.3f} s, "
          f"import ddo {attach['import_s']:.3f} s, connect {attach['connect_s']:.3f} s, attach "
          f"{attach['attach_s']:.3f} s ({attach['tensors']} tensors)")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
