#!/usr/bin/env python3
"""A FLUX.1-dev-size transformer streamed from its safetensors files (issue 33's file tier)
against the same files read into ddod's pool, at one VRAM cap, in one run.

The random model is written once as safetensors shards (the page cache then holds them, as it
does for a model read recently). One ddod serves both components: ``pool`` (loaded into the
host pool) and ``file`` (``file_tier="prefer"``: nothing in the pool; each streamed unit is read
from the files into pinned staging by ddod's read threads, then copied to the GPU). Printed
next to each other with the bounds measured in the same run:

- C: the step with every weight on the GPU (compute);
- B: pinned host-to-device bandwidth; S/B for the bytes a step streams;
- D: the files' read bandwidth with --read-threads threads of 8 MiB preads (page cache warm),
  the threads ddod reads with too; S/D.

A file-tier step is bounded by max(C, S/B, S_file/D), S_file the streamed bytes read from the
files (all of S when the whole component is in files); the pool step by max(C, S/B).

With --split-budget-gb, a second ddod whose RAM budget holds only part of the model loads it
with ``file_tier="auto"``: ddod keeps what its pool can give (spread over the units) and reads
the rest from the files (tier SPLIT): the issue's "pool at half the component" case.

    LD_LIBRARY_PATH=.bundle/lib PYTHONPATH=.device-deps/src:client-python/src \\
      python3 bench/bench_file_tier.py --ddod .bundle/bin/ddod --cap 8 --json-out out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_flux_stream as flux  # noqa: E402

GIB = flux.GIB


def write_shards(model, folder: Path, shard_bytes: int) -> List[Path]:
    """The model's parameters as safetensors shards of about `shard_bytes`, a tensor at a time."""
    import torch

    shards: List[List[Any]] = [[]]
    size = 0
    for name, tensor in model.state_dict().items():
        nbytes = tensor.numel() * tensor.element_size()
        if size and size + nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, tensor))
        size += nbytes
    paths = []
    for index, shard in enumerate(shards):
        header: Dict[str, Any] = {}
        offset = 0
        for name, tensor in shard:
            nbytes = tensor.numel() * tensor.element_size()
            header[name] = {"dtype": "BF16" if tensor.dtype == torch.bfloat16 else "F32",
                            "shape": list(tensor.shape), "data_offsets": [offset, offset + nbytes]}
            offset += nbytes
        encoded = json.dumps(header).encode()
        encoded += b" " * (-len(encoded) % 8)
        path = folder / f"model-{index:05d}.safetensors"
        with open(path, "wb") as file:
            file.write(struct.pack("<Q", len(encoded)) + encoded)
            for _, tensor in shard:
                file.write(tensor.contiguous().view(torch.uint8).numpy().tobytes())
        paths.append(path)
    return paths


def read_bandwidth(paths: List[Path], threads: int = 4, chunk: int = 8 << 20) -> float:
    """GB/s of reading every file with `threads` threads of `chunk`-byte preads."""
    jobs = []
    for path in paths:
        size = path.stat().st_size
        jobs.extend((path, offset, min(chunk, size - offset)) for offset in range(0, size, chunk))
    lock = threading.Lock()
    total = [0]

    def work(part: List[Any]) -> None:
        opened: Dict[Path, int] = {}
        read = 0
        buffer = bytearray(chunk)
        view = memoryview(buffer)
        for path, offset, length in part:
            fd = opened.setdefault(path, os.open(path, os.O_RDONLY))
            read += os.preadv(fd, [view[:length]], offset)
        for fd in opened.values():
            os.close(fd)
        with lock:
            total[0] += read

    started = time.perf_counter()
    workers = [threading.Thread(target=work, args=(jobs[i::threads],)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return total[0] / (time.perf_counter() - started) / 1e9


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ddod", required=True, help="the ddod binary (.bundle/bin/ddod)")
    parser.add_argument("--cap", type=float, default=8.0, help="VRAM cap in GiB (8)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps (3)")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--resolution", type=int, default=1024)
    parser.add_argument("--text-tokens", type=int, default=512)
    parser.add_argument("--small", action="store_true", help="the small smoke config")
    parser.add_argument("--stream-unit", choices=("linear", "block"), default="linear")
    parser.add_argument("--shard-gib", type=float, default=5.0, help="shard size (5 GiB)")
    parser.add_argument("--dir", default="", help="where the shards go (default: a temp dir)")
    parser.add_argument("--skip-pool", action="store_true", help="only the file tier")
    parser.add_argument("--only-split", action="store_true",
                        help="only the split run (with --split-budget-gb)")
    parser.add_argument("--split-budget-gb", type=float, default=0.0,
                        help="also run a ddod with this RAM budget, the model split between its "
                        "pool and the files (e.g. 13 for about half of FLUX)")
    parser.add_argument("--read-threads", type=int, default=4,
                        help="ddod's DDO_FILE_READ_THREADS, and the threads D is measured with (4)")
    parser.add_argument("--json-out", default="")
    args = parser.parse_args()
    args.setting, args.learned_plan = [], True

    import torch

    config = dict(flux.SMALL_CONFIG if args.small else flux.FULL_CONFIG)
    props = torch.cuda.get_device_properties(0)
    figures: Dict[str, Any] = {"device": props.name, "cap_gib": args.cap, "runs": {}}
    model = flux.random_flux_on_gpu(config, "cuda")
    total_bytes = flux.parameter_bytes(model)
    inputs = flux.make_inputs(args.resolution, args.text_tokens, "cuda")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    compute = flux.time_steps(flux.step_fn(model, inputs), 1, args.steps)
    figures["C_s"] = flux.median(compute)
    activations = (torch.cuda.max_memory_allocated() - base) / GIB
    reserve = int((activations + 1.0) * 2 + 0.999) / 2  # as bench_flux_stream's auto reserve
    figures["activation_reserve_gib"] = reserve
    figures["B_gbps"] = flux.pinned_h2d_gbps(GIB, 5)["gbps_median"]
    flux.log(f"{props.name}: model {total_bytes / GIB:.1f} GiB; C = {figures['C_s']:.3f} s; "
             f"B = {figures['B_gbps']:.1f} GB/s")
    torch.nn.Module.to(model, "cpu")
    flux.release_memory()
    host = flux.host_tensors(model)

    folder = Path(args.dir or tempfile.mkdtemp(prefix="ddo-ft-", dir="/tmp"))
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    paths = write_shards(model, folder, int(args.shard_gib * GIB))
    figures["write_s"] = time.perf_counter() - started
    figures["read_threads"] = args.read_threads
    figures["D_gbps"] = read_bandwidth(paths, threads=args.read_threads)
    flux.log(f"{len(paths)} shards written in {figures['write_s']:.1f} s; "
             f"D = {figures['D_gbps']:.1f} GB/s ({args.read_threads} threads, page cache)")
    os.environ["DDO_FILE_READ_THREADS"] = str(args.read_threads)  # ddod inherits it

    from diffusers_dynamic_offloader import DdoClient

    settings = flux.ddo_settings(args.cap, reserve, args)
    device_total = props.total_memory

    def measure(client, key: str, tier: str) -> None:
        started = time.perf_counter()
        loaded = client.load_safetensors(key, str(folder), file_tier=tier, progress=False)
        load_s = time.perf_counter() - started
        before = client.stats().stream
        result = flux.ddo_at_cap(client, model, inputs, args.cap, settings, device_total, args,
                                 key=key)
        after = client.stats().stream
        flux.restore_parameters(model, host)
        streamed = result["stats"].get("streamed_bytes_per_cycle", 0)
        file_streamed = streamed if loaded.tier == "FILE" else 0
        for decision in result.get("plan", {}).get("decisions", []):
            if decision["key"] == "file_bytes_per_pass":
                file_streamed = int(decision["value"])
        result.update(tier=loaded.tier, load_s=load_s, S_bytes=streamed,
                      S_file_bytes=file_streamed, pool_bytes=loaded.pool_bytes,
                      file_bytes=loaded.file_bytes,
                      file_bytes_read=after.file_bytes_read - before.file_bytes_read,
                      staging_waits=after.staging_waits - before.staging_waits)
        bound = max(figures["C_s"], streamed / 1e9 / figures["B_gbps"],
                    file_streamed / 1e9 / figures["D_gbps"])
        result["bound_s"] = bound
        result["step_over_bound"] = result["step_s"] / bound
        figures["runs"][key] = result
        flux.log(f"{key} ({loaded.tier}: {loaded.pool_bytes / GIB:.1f} GiB pool, "
                 f"{loaded.file_bytes / GIB:.1f} GiB files; loaded in {load_s:.1f} s): "
                 f"{result['step_s']:.3f} s/step; S = {streamed / 1e9:.2f} GB/step, S_file = "
                 f"{file_streamed / 1e9:.2f}; bound {bound:.3f} s ({result['step_over_bound']:.2f}x); "
                 f"staging waits {result['staging_waits']}")
        client.evict(key)

    budgets = [] if args.only_split else [
        ("big", max(64, total_bytes / GIB * 1.3), [("pool", "never"), ("file", "prefer")])]
    if args.split_budget_gb > 0:
        budgets.append(("small", args.split_budget_gb, [("split", "auto")]))
    try:
        for label, budget_gb, runs in budgets:
            work = Path(tempfile.mkdtemp(prefix="ddo-ftd-", dir="/tmp"))
            ddod = flux.Ddod(args.ddod, work, ["--ram-budget-gb", f"{budget_gb:g}"])
            try:
                client = DdoClient.connect(ddod.address, timeout=600)
                for key, tier in runs:
                    if key == "pool" and args.skip_pool:
                        continue
                    measure(client, key, tier)
                client.close()
            finally:
                ddod.stop()
    finally:
        if not args.dir:
            shutil.rmtree(folder, ignore_errors=True)
    runs = figures["runs"]
    if "pool" in runs and "file" in runs:
        figures["file_over_pool"] = runs["file"]["step_s"] / runs["pool"]["step_s"]
        flux.log(f"file tier step / pool step = {figures['file_over_pool']:.2f}x")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
