#!/usr/bin/env python3
"""A FLUX.1-dev-size transformer from its safetensors files to its first streamed step, cold
(issue 33, item 3): ddod against diffusers group offloading, from the same files, in one run.

The random model (FluxTransformer2DModel, the FLUX.1-dev configuration, bf16) is saved once by
diffusers (``save_pretrained``: shards, index and config). Before every run the shards are
synced and dropped from the page cache (posix_fadvise DONTNEED, no root needed; the fraction
still resident is printed), and each run is a fresh runner process, timed from the moment its
imports are done (torch, diffusers and the client are imported the same way in every mode) to
the end of its first step at the VRAM cap:

- ``group``: ``from_pretrained`` (bf16), then ``apply_group_offloading`` (block_level, one
  block per group, use_stream, record_stream: diffusers' fastest setting here), first step;
- ``ddo-file``: the skeleton on the meta device, ``load_safetensors(file_tier="prefer")``
  (nothing read ahead: the first step streams straight from the files), then ``stream``;
- ``ddo-pool``: the same with ``file_tier="never"``: the load reads every byte into ddod's
  pool first, then the step streams from the pool.

ddod itself runs before the runners start (it is the long-lived service; its start is not
counted), with a RAM budget that holds the model. The disk's sequential read bandwidth (dd
``iflag=direct`` of the largest shard after the same drop) is printed as the bound.

    LD_LIBRARY_PATH=.bundle/lib PYTHONPATH=.device-deps/src:client-python/src \\
      python3 bench/bench_cold_start.py --ddod .bundle/bin/ddod --cap 8
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_flux_stream as flux  # noqa: E402
from bench_pool_load import drop_page_cache  # noqa: E402

GIB = flux.GIB
MODES = ("ddo-file", "ddo-pool", "group")

RUNNER = r"""
import json, os, sys, time
cfg = json.loads(sys.argv[1])
sys.path.insert(0, cfg["bench_dir"])
import torch
from bench_flux_stream import make_inputs
from diffusers import FluxTransformer2DModel
from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader._proto import sessions_pb2
t0 = time.perf_counter()
marks = {}
total = torch.cuda.get_device_properties(0).total_memory
cap = int(cfg["cap_gib"] * 2**30)
if cfg["mode"] == "group":
    from diffusers.hooks import apply_group_offloading
    model = FluxTransformer2DModel.from_pretrained(cfg["folder"], torch_dtype=torch.bfloat16)
    model.eval().requires_grad_(False)
    marks["from_pretrained_s"] = time.perf_counter() - t0
    apply_group_offloading(model, onload_device=torch.device("cuda:0"),
                           offload_device=torch.device("cpu"), offload_type="block_level",
                           num_blocks_per_group=1, use_stream=True, record_stream=True)
    marks["setup_s"] = time.perf_counter() - t0
    torch.cuda.set_per_process_memory_fraction(min(1.0, cap / total))
else:
    with torch.device("meta"):
        model = FluxTransformer2DModel(**cfg["config"])
    torch.nn.Module.to(model, dtype=torch.bfloat16)
    model.eval().requires_grad_(False)
    client = DdoClient.connect(cfg["address"], timeout=600)
    loaded = client.load_safetensors(cfg["key"], cfg["folder"], file_tier=cfg["file_tier"],
                                     progress=False)
    marks["load_s"] = time.perf_counter() - t0
    marks["tier"] = loaded.tier
    session = client.stream(model, cfg["key"], device="cuda:0", settings=cfg["settings"])
    marks["setup_s"] = time.perf_counter() - t0
    listed = client._unary("ListSessions", sessions_pb2.ListSessionsRequest()).sessions
    mine = [s.device_bytes for s in listed if s.client_pid == os.getpid()]
    torch.cuda.set_per_process_memory_fraction(
        min(1.0, max(0.0, (cap - (max(mine) if mine else 0)) / total)))
inputs = make_inputs(cfg["resolution"], cfg["text_tokens"], "cuda")
with torch.no_grad():
    model(**inputs)
torch.cuda.synchronize()
marks["first_step_end_s"] = time.perf_counter() - t0
with torch.no_grad():
    model(**inputs)
torch.cuda.synchronize()
marks["second_step_s"] = time.perf_counter() - t0 - marks["first_step_end_s"]
if cfg["mode"] != "group":
    session.close()
    client.evict(cfg["key"])
    client.close()
print("COLD " + json.dumps(marks), flush=True)
"""


def resident_fraction(paths: List[Path]) -> float:
    """The fraction of the files' pages in the page cache (mincore over a read-only mapping)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long)
    libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
    libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
    page = mmap.PAGESIZE
    resident = pages = 0
    for path in paths:
        size = path.stat().st_size
        if size == 0:
            continue
        fd = os.open(path, os.O_RDONLY)
        try:
            base = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
            if base in (None, ctypes.c_void_p(-1).value):
                raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
            try:
                count = (size + page - 1) // page
                vector = ctypes.create_string_buffer(count)
                if libc.mincore(base, size, vector) != 0:
                    raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
                resident += sum(byte & 1 for byte in vector.raw)
                pages += count
            finally:
                libc.munmap(base, size)
        finally:
            os.close(fd)
    return resident / pages if pages else 0.0


def drop_from_page_cache(paths: List[Path]) -> float:
    """Syncs and drops the files' pages; returns the fraction still resident afterwards."""
    os.sync()
    for path in paths:
        drop_page_cache(path)
    return resident_fraction(paths)


def disk_gbps(path: Path) -> float:
    """Sequential O_DIRECT read of one file with dd (64 MiB blocks), in GB/s."""
    drop_from_page_cache([path])
    started = time.perf_counter()
    subprocess.run(["dd", f"if={path}", "of=/dev/null", "bs=64M", "iflag=direct"], check=True,
                   capture_output=True)
    return path.stat().st_size / (time.perf_counter() - started) / 1e9


def save_model(config: Dict[str, Any], folder: Path) -> float:
    """The random FLUX transformer saved by diffusers into `folder`; returns the seconds."""
    import torch

    model = flux.random_flux_on_gpu(config, "cuda")
    torch.nn.Module.to(model, "cpu")
    flux.release_memory()
    started = time.perf_counter()
    model.save_pretrained(folder, max_shard_size="5GB")
    seconds = time.perf_counter() - started
    del model
    return seconds


def run_mode(mode: str, payload: Dict[str, Any], timeout: float) -> Dict[str, Any]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(flux.REPO / ".device-deps" / "src"), str(flux.REPO / "client-python" / "src")]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    config = dict(payload, mode=mode, file_tier="prefer" if mode == "ddo-file" else "never")
    spawned = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", RUNNER, json.dumps(config)], env=env,
                           capture_output=True, text=True, timeout=timeout)
    lines = [line for line in child.stdout.splitlines() if line.startswith("COLD ")]
    if child.returncode != 0 or not lines:
        return {"failed": True, "returncode": child.returncode, "stderr": child.stderr[-3000:]}
    marks = json.loads(lines[-1][5:])
    marks["process_wall_s"] = time.perf_counter() - spawned
    return marks


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ddod", required=True, help="the ddod binary (.bundle/bin/ddod)")
    parser.add_argument("--cap", type=float, default=8.0, help="VRAM cap in GiB (8)")
    parser.add_argument("--activation-reserve-gb", type=float, default=3.0)
    parser.add_argument("--resolution", type=int, default=1024)
    parser.add_argument("--text-tokens", type=int, default=512)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--small", action="store_true", help="the small smoke config")
    parser.add_argument("--dir", default="", help="the model folder (written if empty)")
    parser.add_argument("--mode-timeout", type=float, default=400.0)
    parser.add_argument("--json-out", default="")
    args = parser.parse_args()
    args.setting, args.stream_unit = [], "linear"

    import torch

    config = dict(flux.SMALL_CONFIG if args.small else flux.FULL_CONFIG)
    folder = Path(args.dir or tempfile.mkdtemp(prefix="ddo-cold-", dir="/tmp"))
    figures: Dict[str, Any] = {"device": torch.cuda.get_device_name(0), "cap_gib": args.cap,
                               "runs": {}}
    if not (folder / "config.json").exists():
        figures["save_s"] = save_model(config, folder)
        flux.log(f"saved by diffusers in {figures['save_s']:.1f} s: {folder}")
    shards = sorted(folder.glob("*.safetensors"))
    model_bytes = sum(path.stat().st_size for path in shards)
    figures["model_bytes"] = model_bytes
    figures["disk_gbps"] = disk_gbps(max(shards, key=lambda path: path.stat().st_size))
    bound_s = model_bytes / 1e9 / figures["disk_gbps"]
    figures["read_bound_s"] = bound_s
    flux.log(f"{len(shards)} shards, {model_bytes / GIB:.1f} GiB; disk (dd iflag=direct) "
             f"{figures['disk_gbps']:.2f} GB/s: reading it all takes >= {bound_s:.1f} s")

    work = Path(tempfile.mkdtemp(prefix="ddo-coldd-", dir="/tmp"))
    budget = model_bytes / GIB * 1.2 + 4
    ddod = flux.Ddod(args.ddod, work, ["--ram-budget-gb", f"{budget:.0f}"])
    payload = {"address": ddod.address, "key": "bench/flux-cold", "config": config,
               "bench_dir": str(Path(__file__).resolve().parent),
               "folder": str(folder), "cap_gib": args.cap, "resolution": args.resolution,
               "text_tokens": args.text_tokens,
               "settings": flux.ddo_settings(args.cap, args.activation_reserve_gb, args)}
    try:
        for mode in args.modes.split(","):
            still = drop_from_page_cache(shards)
            marks = run_mode(mode, payload, args.mode_timeout)
            marks["resident_before"] = still
            figures["runs"][mode] = marks
            if marks.get("failed"):
                flux.log(f"{mode}: FAILED (rc {marks['returncode']}):\n{marks['stderr']}")
                continue
            flux.log(f"{mode}: first step done {marks['first_step_end_s']:.1f} s after imports "
                     f"(setup {marks['setup_s']:.1f} s; second step {marks['second_step_s']:.2f} "
                     f"s; {still:.1%} of the files resident before)")
    finally:
        ddod.stop()
        shutil.rmtree(work, ignore_errors=True)
        if not args.dir:
            shutil.rmtree(folder, ignore_errors=True)
    runs = figures["runs"]
    group = runs.get("group", {}).get("first_step_end_s")
    print()
    print(f"{figures['device']}, cap {args.cap:g} GiB, {model_bytes / GIB:.1f} GiB from cold "
          f"files; read bound {bound_s:.1f} s at {figures['disk_gbps']:.2f} GB/s")
    print(f"{'mode':10} {'to 1st step':>12} {'setup':>8} {'2nd step':>9} {'vs group':>9}")
    for mode, marks in runs.items():
        if marks.get("failed"):
            print(f"{mode:10} failed")
            continue
        ratio = f"{group / marks['first_step_end_s']:.2f}x" if group else "-"
        print(f"{mode:10} {marks['first_step_end_s']:11.1f}s {marks['setup_s']:7.1f}s "
              f"{marks['second_step_s']:8.2f}s {ratio:>9}")
    if group:
        best = min((m["first_step_end_s"], k) for k, m in runs.items()
                   if k != "group" and not m.get("failed"))
        print(f"goal: cold to first step faster than group offloading: "
              f"{'met' if best[0] < group else 'MISSED'} ({best[1]} {best[0]:.1f} s vs "
              f"{group:.1f} s)")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
