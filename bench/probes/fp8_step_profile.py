"""Where the fp8 FLUX step's time goes (issue 30, item 2): a probe, not a benchmark.

The FLUX.1-dev-size transformer with Diffusers' layerwise casting (float8_e4m3fn storage, bf16
compute) streams through DDO at 8 GiB in 0.240 s (run 41), against 0.182 s for the bf16 model
all on the GPU (C) and 0.220-0.272 s for the fp8 model all on the GPU (C8), while its transfer
bound S/B is 0.167 s. This probe measures, on one GPU, in one process:

  1. C and C8 (median of --steps after a warm-up), and for each how long the Python forward
     takes to return before the GPU finishes (a forward that returns just before the sync
     leaves the GPU waiting for launches: CPU-bound);
  2. the cast alone: every fp8 parameter cast to bf16 once, back to back (GB/s moved);
  3. a DDO session at --cap GiB on the fp8 model: its step and the same CPU figure;
  4. for each of C, C8 and DDO, one step under torch.profiler: the GPU time by kernel (top
     --top), the GPU busy time, and the step's wall time, so the gap between busy and wall is
     the time the GPU waited.

    PYTHONPATH=.device-deps/src:client-python/src LD_LIBRARY_PATH=.bundle/lib \\
        python3 bench/probes/fp8_step_profile.py --ddod .bundle/bin/ddod
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_flux_stream as flux  # noqa: E402


def cpu_and_wall(step: Callable[[], None], repeats: int) -> Dict[str, float]:
    """Median seconds until the forward returns (CPU) and until the GPU is done (wall)."""
    import torch

    cpu, wall = [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        started = time.perf_counter()
        step()
        returned = time.perf_counter()
        torch.cuda.synchronize()
        done = time.perf_counter()
        cpu.append(returned - started)
        wall.append(done - started)
    return {"cpu_s": flux.median(cpu), "wall_s": flux.median(wall)}


def profile_step(step: Callable[[], None], top: int) -> Dict[str, Any]:
    """One step under the profiler: wall time, GPU busy time and the kernels taking most."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        started = time.perf_counter()
        step()
        torch.cuda.synchronize()
        wall = time.perf_counter() - started
    kernels: Dict[str, List[float]] = {}
    for event in prof.events():
        device_type = str(getattr(event, "device_type", ""))
        if "CUDA" not in device_type:
            continue
        us = float(getattr(event, "device_time", 0) or getattr(event, "cuda_time", 0) or 0)
        name = event.name
        if "Memcpy" in name or "Memset" in name:
            name = name.split(" ")[0] + " " + name.split(" ")[1] if " " in name else name
        entry = kernels.setdefault(name, [0, 0.0])
        entry[0] += 1
        entry[1] += us
    compute = {k: v for k, v in kernels.items() if not k.startswith("Memcpy")}
    idle = idle_profile(prof)
    busy_us = sum(v[1] for v in compute.values())
    rows = sorted(compute.items(), key=lambda item: -item[1][1])[:top]
    return {
        "wall_s": wall,
        "kernel_busy_s": busy_us / 1e6,
        "kernel_launches": sum(v[0] for v in compute.values()),
        "memcpy": {k: {"count": v[0], "ms": v[1] / 1e3} for k, v in kernels.items()
                   if k.startswith("Memcpy")},
        "top": [{"kernel": name[:90], "count": count, "ms": us / 1e3}
                for name, (count, us) in rows],
        "idle": idle,
    }


def idle_profile(prof, bins: int = 10) -> Dict[str, Any]:
    """Where the GPU waited: the gaps between kernels (copies aside) over one step, as the
    idle milliseconds in each tenth of the step, and how many gaps there were by length. Many
    short gaps spread evenly point at a per-unit latency (the CPU in the loop); long gaps in one
    part of the step point at copies that outrun compute there."""
    intervals = []
    for event in prof.events():
        if "CUDA" not in str(getattr(event, "device_type", "")) or event.name.startswith(
                ("Memcpy", "Memset")):
            continue
        start = getattr(event, "time_range", None)
        if start is None:
            continue
        intervals.append((float(start.start), float(start.end)))
    if not intervals:
        return {}
    intervals.sort()
    begin, end = intervals[0][0], max(e for _, e in intervals)
    span = max(end - begin, 1.0)
    by_bin = [0.0] * bins
    lengths = {"under_20us": [0, 0.0], "20_100us": [0, 0.0], "100us_1ms": [0, 0.0],
               "over_1ms": [0, 0.0]}
    reach = intervals[0][1]
    for start, stop in intervals[1:]:
        if start > reach:
            gap = start - reach
            by_bin[min(bins - 1, int((reach - begin) / span * bins))] += gap / 1e3
            key = ("under_20us" if gap < 20 else "20_100us" if gap < 100 else
                   "100us_1ms" if gap < 1000 else "over_1ms")
            lengths[key][0] += 1
            lengths[key][1] += gap / 1e3
        reach = max(reach, stop)
    return {"span_ms": span / 1e3, "idle_ms_by_tenth": [round(v, 2) for v in by_bin],
            "gaps": {k: {"count": c, "ms": round(ms, 2)} for k, (c, ms) in lengths.items()}}


def ddo_session(client, model, settings: Dict[str, str], step: Callable[[], None], args,
                label: str) -> Dict[str, Any]:
    """One DDO session on the fp8 model: its step timed and profiled, its stats."""
    import torch

    session = client.stream(model, flux.KEY_FP8, device="cuda:0", settings=settings)
    try:
        total = torch.cuda.get_device_properties(0).total_memory
        device_bytes = flux.session_device_bytes(client, session, os.getpid(), flux.KEY_FP8)
        flux.set_fraction((int(args.cap * flux.GIB) - device_bytes) / total)
        flux.time_steps(step, 2, 1)
        decisions = {d.key: d.value for d in session.plan.decisions}
        result = {**cpu_and_wall(step, args.steps), "profile": profile_step(step, args.top),
                  "stats": flux.numeric(session.stats()), "settings": settings,
                  "resident": {key: decisions[key] for key in
                               ("resident_selection", "resident_blocks", "resident_weights")
                               if key in decisions}}
    finally:
        session.close()
        flux.set_fraction(1.0)
    stats = result["stats"]
    flux.log(f"{label}: resident {stats.get('resident_bytes', 0) / flux.GIB:.2f} GiB, streamed "
             f"{stats.get('streamed_bytes_per_cycle', 0) / 1e9:.2f} GB/step, ring "
             f"{stats.get('ring_slots', 0):.0f} slots of {stats.get('ring_slot_bytes', 0) / 2**20:.0f} MiB")
    flux.log(f"{label}: resident set: {result['resident']}")
    show(label, result, result["profile"])
    return result


def triton_cast_seconds(parameters) -> Optional[float]:
    """The same casts with a vectorized Triton kernel, when Triton is there: what a cast kernel
    of DDO's own could take (None without Triton)."""
    try:
        import triton
        import triton.language as tl
    except ImportError:
        return None
    import torch

    @triton.jit
    def cast_kernel(source, destination, count, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < count
        values = tl.load(source + offsets, mask=mask)
        tl.store(destination + offsets, values.to(tl.bfloat16), mask=mask)

    outputs = [torch.empty(p.shape, dtype=torch.bfloat16, device=p.device) for p in parameters]
    block = 4096

    def run() -> None:
        for parameter, output in zip(parameters, outputs):
            count = parameter.numel()
            cast_kernel[(triton.cdiv(count, block),)](parameter, output, count, BLOCK=block)

    run()
    torch.cuda.synchronize()
    started = time.perf_counter()
    run()
    torch.cuda.synchronize()
    seconds = time.perf_counter() - started
    same = all(torch.equal(output, parameter.to(torch.bfloat16))
               for parameter, output in zip(parameters, outputs))
    flux.log(f"the same casts with a Triton kernel: {seconds * 1e3:.1f} ms, bitwise equal to "
             f"torch's: {same}")
    return seconds


def show(label: str, timing: Dict[str, float], profiled: Dict[str, Any]) -> None:
    flux.log(f"{label}: wall {timing['wall_s']:.4f} s, forward returns after "
             f"{timing['cpu_s']:.4f} s; profiled step {profiled['wall_s']:.4f} s with "
             f"{profiled['kernel_busy_s']:.4f} s of kernels ({profiled['kernel_launches']} "
             f"launches)")
    for row in profiled["top"]:
        flux.log(f"    {row['ms']:8.2f} ms {row['count']:6d}x  {row['kernel']}")
    idle = profiled.get("idle") or {}
    if idle:
        flux.log(f"    idle ms by tenth of the step: {idle['idle_ms_by_tenth']}; gaps "
                 + ", ".join(f"{k} {v['count']}x {v['ms']} ms" for k, v in idle["gaps"].items()))
    for name, entry in profiled["memcpy"].items():
        flux.log(f"    {entry['ms']:8.2f} ms {entry['count']:6d}x  {name} (copy engine)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ddod", required=True, help="the ddod binary")
    parser.add_argument("--cap", type=float, default=8.0, help="DDO's VRAM cap in GiB (8)")
    parser.add_argument("--reserve", type=float, default=1.5,
                        help="DDO_ACTIVATION_RESERVE_GB (1.5, as run 41)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--small", action="store_true", help="2 + 4 blocks (smoke)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=VALUE,...",
                        help="after the default DDO session, one more with these settings added "
                             "(repeatable), e.g. DDO_MAX_RESIDENT_MODULE_BUDGET_GB=3")
    parser.add_argument("--json-out", default="")
    args = parser.parse_args()

    import torch

    config = dict(flux.SMALL_CONFIG if args.small else flux.FULL_CONFIG)
    inputs = flux.make_inputs(1024, 512, "cuda")
    figures: Dict[str, Any] = {"gpu": torch.cuda.get_device_name(0)}
    flux.log(f"{figures['gpu']}; torch {torch.__version__}")

    model = flux.random_flux_on_gpu(config, "cuda")
    step = flux.step_fn(model, inputs)
    flux.time_steps(step, 1, 1)
    figures["C"] = {**cpu_and_wall(step, args.steps), "profile": profile_step(step, args.top)}
    show("C (bf16, all on the GPU)", figures["C"], figures["C"]["profile"])

    model.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn,
                                   compute_dtype=torch.bfloat16)
    fp8 = [p for p in model.parameters() if p.dtype == torch.float8_e4m3fn]
    elements = sum(p.numel() for p in fp8)
    for _ in range(2):
        torch.cuda.synchronize()
        started = time.perf_counter()
        for parameter in fp8:
            parameter.to(torch.bfloat16)
        torch.cuda.synchronize()
        cast_s = time.perf_counter() - started
    figures["cast"] = {"parameters": len(fp8), "elements": elements, "seconds": cast_s,
                       "gb_per_s_moved": elements * 3 / cast_s / 1e9}
    flux.log(f"cast of every fp8 parameter to bf16 once: {len(fp8)} tensors, "
             f"{elements / 1e9:.2f} B elements in {cast_s * 1e3:.1f} ms "
             f"({figures['cast']['gb_per_s_moved']:.0f} GB/s read + written)")

    figures["cast"]["triton_seconds"] = triton_cast_seconds(fp8)
    flux.time_steps(step, 1, 1)
    figures["C8"] = {**cpu_and_wall(step, args.steps), "profile": profile_step(step, args.top)}
    show("C8 (fp8 storage, all on the GPU)", figures["C8"], figures["C8"]["profile"])

    from diffusers_dynamic_offloader import DdoClient

    torch.nn.Module.to(model, "cpu")
    flux.release_memory()
    work = Path(tempfile.mkdtemp(prefix="ddo-fp8-probe-", dir="/tmp"))
    ddod = flux.Ddod(args.ddod, work, [])
    try:
        client = DdoClient.connect(ddod.address, timeout=600)
        started = time.perf_counter()
        client.register_module(flux.KEY_FP8, model, progress=False)
        figures["register_s"] = time.perf_counter() - started
        copied = [line for line in ddod.log_tail(20000).splitlines() if "copied into" in line]
        flux.log(f"registered the fp8 model in {figures['register_s']:.1f} s; "
                 f"{copied[-1].split('store: ')[-1] if copied else 'no copy logged'}")
        base = {"DDO_VRAM_BUDGET_GB": f"{args.cap:g}",
                "DDO_ACTIVATION_RESERVE_GB": f"{args.reserve:g}",
                "DDO_STREAM_UNIT": "linear"}
        host = flux.host_tensors(model)
        figures["variants"] = {}
        for variant in [""] + args.variant:
            extra = dict(item.split("=", 1) for item in variant.split(",") if item)
            label = f"DDO fp8 at {args.cap:g} GiB" + (f" with {variant}" if variant else "")
            try:
                figures["variants"][variant or "default"] = ddo_session(
                    client, model, {**base, **extra}, step, args, label)
            except Exception as error:  # noqa: BLE001 - recorded, the probe goes on
                flux.log(f"{label}: {flux.describe_error(error)}")
                figures["variants"][variant or "default"] = {"error": flux.describe_error(error)}
                flux.set_fraction(1.0)
            flux.restore_parameters(model, host)
            flux.release_memory()
        figures["DDO"] = figures["variants"]["default"]
        client.close()
    finally:
        ddod.stop()
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=1))
        flux.log(f"wrote {args.json_out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
