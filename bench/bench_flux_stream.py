#!/usr/bin/env python3
"""FLUX.1-dev-size transformer streamed by DDO under VRAM caps, against diffusers' group offloading.

One run on one GPU measures, for a FluxTransformer2DModel(guidance_embeds=True) with random bf16
weights (22.2 GiB at full size), 1024x1024 (4096 image tokens) and 512 text tokens, one forward
per denoising step:

  * C: seconds per step with every weight on the GPU (compute only, no cap);
  * B: pinned host-to-device bandwidth (torch copy from a pinned tensor, median);
  * DDO at each VRAM cap: a streaming session (client.stream) with DDO_VRAM_BUDGET_GB=cap; the
    runner's own allocations are capped with torch.cuda.set_per_process_memory_fraction to
    (cap - the session's device bytes) / total, so ddod's slab and ring plus the runner's
    activations stay within the cap. S = streamed bytes per step (session statistics); the
    bound is max(C, S/B). ddod plans the resident set from what a forward of the component
    computed (DDO_RESIDENT_MODULE_SELECTION=auto): when a session was planned without it, that
    session runs one forward and closes, and the next one is measured (--no-learned-plan
    measures the first);
  * diffusers apply_group_offloading, block_level (1 block per group, use_stream,
    record_stream) and leaf_level (use_stream), each set up once and then timed under every
    cap (memory fraction cap / total);
  * warm start: a fresh runner process (component already in ddod) from its start to its first
    finished step, split into imports and the rest; against cold starts from the weights in
    RAM (defined where printed).

Every step time is the median of --steps steps after --warmup warm-up steps. Prints a table,
the goals with PASS/MISS, and writes everything as JSON (--json-out).

    LD_LIBRARY_PATH=.bundle/lib PYTHONPATH=.device-deps/src:client-python/src \\
        python3 bench/bench_flux_stream.py --ddod .bundle/bin/ddod --json-out flux.json

--small builds a 2 + 4 block model for a quick smoke run of the whole script.

--fp8 adds, after the bf16 DDO runs, the same model with Diffusers' layerwise casting
(``enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.bfloat16)``,
the model's default skip patterns): C8 with every weight on the GPU, then a DDO session at every
cap of --fp8-caps (default 8) whose units carry the stored fp8 bytes; it reports S, the PCIe
bound max(C8, S/B) and the ratio to the bf16 step at the same cap (goal: >= 1.6x at 8 GiB).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
for extra_path in (REPO / "client-python" / "src", REPO / ".device-deps" / "src"):
    if extra_path.is_dir() and str(extra_path) not in sys.path:
        sys.path.insert(0, str(extra_path))

GIB = 1 << 30
STARTED = time.perf_counter()
KEY = "bench/flux-dev-random:bf16"

FULL_CONFIG = {"guidance_embeds": True}  # the class defaults: 19 double + 38 single blocks
SMALL_CONFIG = {"guidance_embeds": True, "num_layers": 2, "num_single_layers": 4}

GOAL_BOUND_RATIO = 1.10
GOAL_SPEEDUP_16 = 2.0
GOAL_WARM_S = 1.0
GOAL_H2D_SHARE = 0.90
GOAL_FP8_SPEEDUP_8 = 1.6
KEY_FP8 = "bench/flux-dev-random:fp8-layerwise"


def log(message: str) -> None:
    print(f"[{time.perf_counter() - STARTED:7.1f}s] {message}", flush=True)


def fail(message: str) -> "NoReturn":  # noqa: F821
    print(f"bench_flux_stream: {message}", file=sys.stderr, flush=True)
    sys.exit(2)


def median(values: List[float]) -> Optional[float]:
    return statistics.median(values) if values else None


def fmt(value: Optional[float], spec: str = ".3f", missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


# ---------------------------------------------------------------------------------------------
# The model and its inputs.


def import_flux():
    try:
        from diffusers import FluxTransformer2DModel
    except ImportError as error:
        fail(f"cannot import diffusers ({error}). Export it into .device-deps/src (see "
             f"/work/shared/DEVICE.md) and put it on PYTHONPATH, e.g. "
             f"PYTHONPATH=.device-deps/src:client-python/src")
    return FluxTransformer2DModel


def meta_flux(config: Dict[str, Any]):
    """The model skeleton on the meta device, in bf16 (no memory, no weights)."""
    import torch

    flux_class = import_flux()
    with torch.device("meta"):
        model = flux_class(**config)
    torch.nn.Module.to(model, dtype=torch.bfloat16)
    return model.eval().requires_grad_(False)


def random_flux_on_gpu(config: Dict[str, Any], device: str):
    """The model with normal(0, 0.02) bf16 weights, filled on the GPU (fast; the CPU takes
    minutes for 12 B parameters)."""
    import torch

    model = meta_flux(config)
    model.to_empty(device=device)
    generator = torch.Generator(device=device).manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0.0, 0.02, generator=generator)
    for name, buffer in model.named_buffers():
        if buffer.is_meta:
            raise RuntimeError(f"buffer {name} was left on the meta device")
    torch.cuda.synchronize()
    return model


def make_inputs(resolution: int, text_tokens: int, device: str) -> Dict[str, Any]:
    """What FluxPipeline passes the transformer at resolution x resolution, batch 1."""
    import torch

    side = resolution // 16  # VAE /8, then 2x2 patches
    generator = torch.Generator(device=device).manual_seed(1)
    img_ids = torch.zeros(side, side, 3, device=device)
    img_ids[..., 1] = torch.arange(side, device=device)[:, None]
    img_ids[..., 2] = torch.arange(side, device=device)[None, :]
    bf16 = torch.bfloat16
    return {
        "hidden_states": torch.randn(1, side * side, 64, generator=generator, device=device,
                                     dtype=bf16),
        "encoder_hidden_states": torch.randn(1, text_tokens, 4096, generator=generator,
                                             device=device, dtype=bf16),
        "pooled_projections": torch.randn(1, 768, generator=generator, device=device, dtype=bf16),
        "timestep": torch.tensor([0.5], device=device, dtype=bf16),
        "img_ids": img_ids.reshape(side * side, 3),
        "txt_ids": torch.zeros(text_tokens, 3, device=device),
        "guidance": torch.tensor([3.5], device=device, dtype=torch.float32),
        "return_dict": False,
    }


def step_fn(model, inputs) -> Callable[[], None]:
    import torch

    def step() -> None:
        with torch.no_grad():
            model(**inputs)

    return step


def time_step(step: Callable[[], None]) -> float:
    import torch

    torch.cuda.synchronize()
    started = time.perf_counter()
    step()
    torch.cuda.synchronize()
    return time.perf_counter() - started


def time_steps(step: Callable[[], None], warmup: int, steps: int) -> List[float]:
    for _ in range(warmup):
        time_step(step)
    return [time_step(step) for _ in range(steps)]


def parameter_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def host_tensors(model) -> Dict[str, Any]:
    """name -> the parameter's current host tensor (kept to restore the model later)."""
    return {name: parameter.data for name, parameter in model.named_parameters()}


def restore_parameters(model, host: Dict[str, Any]) -> None:
    """Makes every parameter a fresh nn.Parameter of its original host tensor, whatever a
    streaming session or an offloading hook did to it."""
    import torch

    for path, owner in model.named_modules():
        prefix = f"{path}." if path else ""
        for attribute, parameter in list(owner._parameters.items()):
            if parameter is not None:
                owner._parameters[attribute] = torch.nn.Parameter(host[prefix + attribute],
                                                                  requires_grad=False)


def release_memory() -> None:
    import gc

    import torch

    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    host_empty_cache = getattr(torch._C, "_host_emptyCache", None)
    if host_empty_cache is not None:
        host_empty_cache()  # pinned blocks freed by torch go back to the system


def set_fraction(fraction: float) -> None:
    import torch

    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(min(max(fraction, 0.0), 1.0))


def is_oom(error: BaseException) -> bool:
    import torch

    return isinstance(error, torch.cuda.OutOfMemoryError) or "out of memory" in str(error)


def describe_error(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return ("OOM: " if is_oom(error) else "") + text[:300]


# ---------------------------------------------------------------------------------------------
# Bandwidth.


def pinned_h2d_gbps(size_bytes: int, repeats: int) -> Dict[str, Any]:
    import torch

    source = torch.empty(size_bytes, dtype=torch.uint8, pin_memory=True)
    source.fill_(1)
    target = torch.empty(size_bytes, dtype=torch.uint8, device="cuda")
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    target.copy_(source, non_blocking=True)
    torch.cuda.synchronize()
    rates = []
    for _ in range(repeats):
        start.record()
        target.copy_(source, non_blocking=True)
        end.record()
        end.synchronize()
        rates.append(size_bytes / (start.elapsed_time(end) / 1e3) / 1e9)
    del source, target
    release_memory()
    return {"bytes": size_bytes, "gbps_median": median(rates), "gbps_all": rates}


# ---------------------------------------------------------------------------------------------
# ddod.


class Ddod:
    """A private ddod (temp state dir and socket, --discard) started by this benchmark."""

    def __init__(self, binary: str, work: Path, extra_args: List[str]) -> None:
        if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
            fail(f"--ddod {binary!r} is not an executable file")
        self.socket = work / "ddod.sock"
        self.log_path = work / "ddod.log"
        self._log = open(self.log_path, "w")
        command = [binary, "--preset", "warm_process", "--socket", str(self.socket),
                   "--state-dir", str(work / "state"), "--discard", *extra_args]
        log(f"starting ddod: {' '.join(command)}")
        self.proc = subprocess.Popen(command, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not self.socket.exists():
            if self.proc.poll() is not None:
                fail(f"ddod exited with {self.proc.returncode} at start (is LD_LIBRARY_PATH set "
                     f"to the bundle's lib/?); log:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                fail(f"ddod did not create {self.socket} within 30 s; log:\n{self.log_tail()}")
            time.sleep(0.05)
        self.address = f"unix:{self.socket}"

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def stop(self) -> Optional[int]:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def session_device_bytes(client, session, pid: int, key: str = KEY) -> int:
    """ddod's device bytes for this session (slab + ring), from ListSessions; from the session
    statistics where the listing has no match."""
    from diffusers_dynamic_offloader._proto import sessions_pb2

    listed = client._unary("ListSessions", sessions_pb2.ListSessionsRequest()).sessions
    session_id = getattr(session, "session_id", None)
    mine = [s for s in listed if (s.session_id == session_id[:8] if session_id else
                                  s.client_pid == pid and s.cache_key == key)]
    if mine and max(s.device_bytes for s in mine) > 0:
        return max(s.device_bytes for s in mine)
    stats = session.stats()
    return (int(stats.get("resident_bytes", 0)) + int(stats.get("ring_arena_bytes", 0))
            + int(stats.get("ring_slot_bytes", 0)))


def _decision(summary: Dict[str, Any], key: str) -> str:
    """A decision's value (and reason) from a plan_summary, or "-"."""
    for decision in summary.get("decisions", []):
        if decision["key"] == key:
            return f"{decision['value']} ({decision['reason']})"
    return "-"


def plan_summary(plan) -> Dict[str, Any]:
    if plan is None:
        return {}
    return {
        "route": plan.route,
        "resident_bytes": plan.resident_bytes,
        "streamed_bytes": plan.streamed_bytes,
        "ring_slots": plan.ring_slots,
        "decisions": [{"key": d.key, "value": d.value, "reason": d.reason}
                      for d in list(plan.decisions)[:120]],
    }


def numeric(stats: Dict[str, Any]) -> Dict[str, float]:
    return {k: v for k, v in dict(stats).items()
            if isinstance(v, (int, float)) and not isinstance(v, bool)}


def ddo_settings(cap_gib: float, reserve_gib: float, args) -> Dict[str, str]:
    settings = {"DDO_VRAM_BUDGET_GB": f"{cap_gib:g}",
                "DDO_ACTIVATION_RESERVE_GB": f"{reserve_gib:g}",
                "DDO_STREAM_UNIT": args.stream_unit}
    for item in args.setting:
        name, _, value = item.partition("=")
        settings[name] = value
    return settings


def rows_not_learned(session) -> bool:
    """True when ddod planned the session without what a forward of the component computes."""
    plan = getattr(session, "plan", None)
    return any(d.key == "resident_selection" and "no forward" in d.reason
               for d in getattr(plan, "decisions", ()))


def ddo_at_cap(client, model, inputs, cap_gib: float, settings: Dict[str, str], total: int,
               args, key: str = KEY) -> Dict[str, Any]:
    import torch

    result: Dict[str, Any] = {"cap_gib": cap_gib, "settings": settings}
    set_fraction(1.0)
    started = time.perf_counter()
    session = client.stream(model, key, device="cuda:0", settings=settings)
    result["open_s"] = time.perf_counter() - started
    if getattr(args, "learned_plan", True) and rows_not_learned(session):
        # ddod plans the resident set from what a forward of the component computed
        # (DDO_RESIDENT_MODULE_SELECTION=auto); the first session of a component learns it, as a
        # warm_process ddod's first runner does. Measure the session planned with it.
        try:
            set_fraction(max(int(cap_gib * GIB) - session_device_bytes(
                client, session, os.getpid(), key), 1) / total)
            result["learning_forward_s"] = time_step(step_fn(model, inputs))
        finally:
            session.close()
            set_fraction(1.0)
            release_memory()
        started = time.perf_counter()
        session = client.stream(model, key, device="cuda:0", settings=settings)
        result["open_s"] = time.perf_counter() - started
    try:
        result["plan"] = plan_summary(getattr(session, "plan", None))
        device_bytes = session_device_bytes(client, session, os.getpid(), key)
        result["session_device_bytes"] = device_bytes
        runner_bytes = int(cap_gib * GIB) - device_bytes
        if runner_bytes <= 0:
            raise RuntimeError(f"ddod's session uses {device_bytes / GIB:.2f} GiB, more than the "
                               f"{cap_gib:g} GiB cap")
        result["runner_fraction"] = runner_bytes / total
        set_fraction(runner_bytes / total)
        torch.cuda.reset_peak_memory_stats()
        step = step_fn(model, inputs)
        result["first_forward_s"] = time_step(step)  # the learning forward (or a known schedule)
        result["stats_after_first"] = numeric(session.stats())
        for _ in range(args.warmup):
            time_step(step)
        before = numeric(session.stats())
        times = [time_step(step) for _ in range(args.steps)]
        after = numeric(session.stats())
        result["steps_s"] = times
        result["step_s"] = median(times)
        result["stats"] = after
        result["stats_timed_delta"] = {k: after[k] - before.get(k, 0) for k in after}
        result["runner_peak_bytes"] = torch.cuda.max_memory_reserved()
    finally:
        started = time.perf_counter()
        session.close()
        result["close_s"] = time.perf_counter() - started
        set_fraction(1.0)
        release_memory()
    return result


WARM_CHILD = r"""
import time
t_start = time.time()
import json, os, sys
cfg = json.loads(sys.argv[1])
import torch
from diffusers import FluxTransformer2DModel
from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader._proto import sessions_pb2
t_imports = time.time()
with torch.device("meta"):
    model = FluxTransformer2DModel(**cfg["config"])
torch.nn.Module.to(model, dtype=torch.bfloat16)
model.eval().requires_grad_(False)
t_built = time.time()
client = DdoClient.connect(cfg["address"], timeout=600)
t_connected = time.time()
t_bound = t_connected
session = client.stream(model, cfg["key"], device="cuda:0", settings=cfg["settings"])
t_session = time.time()
listed = client._unary("ListSessions", sessions_pb2.ListSessionsRequest()).sessions
mine = [s.device_bytes for s in listed if s.client_pid == os.getpid()]
device_bytes = max(mine) if mine else 0
total = torch.cuda.get_device_properties(0).total_memory
torch.cuda.set_per_process_memory_fraction(
    min(1.0, max(0.0, (int(cfg["cap_gib"] * 2**30) - device_bytes) / total)))
side = cfg["resolution"] // 16
dev, bf16 = "cuda", torch.bfloat16
img_ids = torch.zeros(side, side, 3, device=dev)
img_ids[..., 1] = torch.arange(side, device=dev)[:, None]
img_ids[..., 2] = torch.arange(side, device=dev)[None, :]
inputs = dict(
    hidden_states=torch.randn(1, side * side, 64, device=dev, dtype=bf16),
    encoder_hidden_states=torch.randn(1, cfg["text_tokens"], 4096, device=dev, dtype=bf16),
    pooled_projections=torch.randn(1, 768, device=dev, dtype=bf16),
    timestep=torch.tensor([0.5], device=dev, dtype=bf16),
    img_ids=img_ids.reshape(side * side, 3), txt_ids=torch.zeros(cfg["text_tokens"], 3, device=dev),
    guidance=torch.tensor([3.5], device=dev), return_dict=False)
with torch.no_grad():
    model(**inputs)
torch.cuda.synchronize()
t_first = time.time()
stats_first = {k: v for k, v in dict(session.stats()).items() if isinstance(v, (int, float))}
with torch.no_grad():
    model(**inputs)
torch.cuda.synchronize()
t_second = time.time()
session.close()
client.close()
print("WARM " + json.dumps(dict(t_start=t_start, t_imports=t_imports, t_built=t_built,
    t_connected=t_connected, t_bound=t_bound, t_session=t_session, t_first=t_first,
    open_seconds=getattr(session, "open_seconds", {}),
    second_step_s=t_second - t_first, device_bytes=device_bytes, stats_first=stats_first)))
"""


def warm_start(address: str, config: Dict[str, Any], settings: Dict[str, str], cap_gib: float,
               args) -> Dict[str, Any]:
    env = dict(os.environ, DDO_DAEMON=address)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / ".device-deps" / "src"), str(REPO / "client-python" / "src")]
        + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    payload = json.dumps({"address": address, "key": KEY, "config": config,
                          "settings": settings, "cap_gib": cap_gib,
                          "resolution": args.resolution, "text_tokens": args.text_tokens})
    runs = []
    for run in range(args.warm_runs):
        spawned = time.time()
        child = subprocess.run([sys.executable, "-c", WARM_CHILD, payload], env=env,
                               capture_output=True, text=True, timeout=300)
        wall = time.time() - spawned
        lines = [line for line in child.stdout.splitlines() if line.startswith("WARM ")]
        if child.returncode != 0 or not lines:
            raise RuntimeError(f"warm runner exited {child.returncode}:\n{child.stderr[-3000:]}")
        t = json.loads(lines[-1][5:])
        figures = {
            "process_wall_s": wall,
            "imports_s": t["t_imports"] - spawned,  # interpreter start + torch, diffusers, ddo
            "after_imports_to_first_step_s": t["t_first"] - t["t_imports"],
            "build_meta_model_s": t["t_built"] - t["t_imports"],
            "connect_s": t["t_connected"] - t["t_built"],
            "open_session_s": t["t_session"] - t["t_bound"],
            "first_step_s": t["t_first"] - t["t_session"],
            "spawn_to_first_step_s": t["t_first"] - spawned,
            "second_step_s": t["second_step_s"],
            "session_device_bytes": t["device_bytes"],
            "stats_after_first_step": t["stats_first"],
            # Where opening the session went (StreamingSession.open_seconds).
            "open_session_parts_s": t.get("open_seconds", {}),
        }
        log(f"warm run {run + 1}: imports {figures['imports_s']:.2f} s, then first step after "
            f"{figures['after_imports_to_first_step_s']:.3f} s (model skeleton "
            f"{figures['build_meta_model_s']:.3f}, connect {figures['connect_s']:.3f}, "
            f"session {figures['open_session_s']:.3f}, step "
            f"{figures['first_step_s']:.3f}); the session: "
            + ", ".join(f"{name} {seconds:.3f}"
                        for name, seconds in figures["open_session_parts_s"].items()))
        runs.append(figures)
    summary = {name: median([r[name] for r in runs]) for name in runs[0]
               if isinstance(runs[0][name], (int, float))}
    return {"cap_gib": cap_gib, "runs": runs, "median": summary}


# ---------------------------------------------------------------------------------------------
# diffusers group offloading.


def group_offload_options(kind: str) -> Dict[str, Any]:
    """apply_group_offloading's arguments for the anchor ``kind``: block_level (one block per
    group, use_stream, record_stream) or leaf_level (use_stream)."""
    import torch

    options: Dict[str, Any] = dict(onload_device=torch.device("cuda:0"),
                                   offload_device=torch.device("cpu"), use_stream=True)
    if kind == "block_level":
        options.update(offload_type="block_level", num_blocks_per_group=1, record_stream=True)
    else:
        options.update(offload_type="leaf_level")
    return options


def remove_group_offloading(model) -> None:
    from diffusers.hooks import HookRegistry
    from diffusers.hooks import group_offloading as go

    registry = HookRegistry.check_if_exists_or_initialize(model)
    for name in (go._GROUP_OFFLOADING, go._LAYER_EXECUTION_TRACKER,
                 go._LAZY_PREFETCH_GROUP_OFFLOADING):
        registry.remove_hook(name, recurse=True)


def diffusers_anchor(model, host, inputs, kind: str, caps: List[float], total: int,
                     args) -> Dict[str, Any]:
    import torch
    from diffusers.hooks import apply_group_offloading

    result: Dict[str, Any] = {"caps": {}}
    restore_parameters(model, host)
    release_memory()
    set_fraction(1.0)
    options = group_offload_options(kind)
    result["options"] = {k: str(v) for k, v in options.items()}
    log(f"diffusers {kind}: apply_group_offloading({result['options']})")
    started = time.perf_counter()
    apply_group_offloading(model, **options)
    result["setup_s"] = time.perf_counter() - started
    log(f"diffusers {kind}: setup {result['setup_s']:.1f} s")
    try:
        step = step_fn(model, inputs)
        for index, cap in enumerate(caps):
            figures: Dict[str, Any] = {"cap_gib": cap, "fraction": cap * GIB / total}
            result["caps"][str(cap)] = figures
            try:
                set_fraction(cap * GIB / total)
                torch.cuda.reset_peak_memory_stats()
                if index == 0:
                    figures["first_step_s"] = result["first_step_s"] = time_step(step)
                times = time_steps(step, args.warmup, args.steps)
                figures["steps_s"] = times
                figures["step_s"] = median(times)
                figures["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
                log(f"diffusers {kind} at {cap:g} GiB: {figures['step_s']:.3f} s/step")
            except Exception as error:  # noqa: BLE001 - recorded, the run goes on
                figures["error"] = describe_error(error)
                log(f"diffusers {kind} at {cap:g} GiB: {figures['error']}")
                if not is_oom(error):
                    traceback.print_exc()
    finally:
        set_fraction(1.0)
        try:
            remove_group_offloading(model)
        except Exception as error:  # noqa: BLE001
            result["remove_error"] = describe_error(error)
            log(f"diffusers {kind}: removing the hooks failed: {result['remove_error']}")
        restore_parameters(model, host)
        release_memory()
    return result


# ---------------------------------------------------------------------------------------------
# Report.


def fp8_runs(client, config: Dict[str, Any], inputs, caps: List[float], reserve: float,
             total: int, bandwidth: Optional[float], bf16_caps: Dict[str, Any],
             args) -> Dict[str, Any]:
    """The model with fp8 layerwise-casting storage: C8 all on the GPU, then a DDO session at
    every cap, each against the bf16 step at the same cap and the PCIe bound max(C8, S/B)."""
    import torch

    figures: Dict[str, Any] = {"storage": "float8_e4m3fn", "compute": "bfloat16", "caps": {}}
    log("fp8: building the model on the GPU, enable_layerwise_casting(float8_e4m3fn -> bf16)...")
    model = random_flux_on_gpu(config, "cuda")
    model.enable_layerwise_casting(storage_dtype=torch.float8_e4m3fn, compute_dtype=torch.bfloat16)
    stored = parameter_bytes(model)
    figures["model_bytes"] = stored
    figures["fp8_parameters"] = sum(p.numel() for p in model.parameters()
                                    if p.dtype == torch.float8_e4m3fn)
    times = time_steps(step_fn(model, inputs), max(1, args.warmup), args.steps)
    figures["compute_step_s"] = median(times)
    log(f"fp8: {stored / GIB:.2f} GiB stored ({figures['fp8_parameters'] / 1e9:.2f} B parameters "
        f"in fp8); C8 = {figures['compute_step_s']:.3f} s/step all on the GPU")
    torch.nn.Module.to(model, "cpu")
    release_memory()
    started = time.perf_counter()
    client.register_module(KEY_FP8, model, progress=False)
    figures["register_s"] = time.perf_counter() - started
    for cap in caps:
        try:
            result = ddo_at_cap(client, model, inputs, cap, ddo_settings(cap, reserve, args),
                                total, args, key=KEY_FP8)
        except Exception as error:  # noqa: BLE001 - recorded, the run goes on
            result = {"cap_gib": cap, "error": describe_error(error)}
            log(f"fp8 at {cap:g} GiB: {result['error']}")
            traceback.print_exc()
            set_fraction(1.0)
            release_memory()
            figures["caps"][str(cap)] = result
            continue
        s_bytes = result["stats"].get("streamed_bytes_per_cycle", 0)
        bound = (max(figures["compute_step_s"], s_bytes / (bandwidth * 1e9))
                 if bandwidth else None)
        bf16 = bf16_caps.get(str(cap), {})
        result["bound_s"] = bound
        result["bf16_step_s"] = bf16.get("step_s")
        result["bf16_streamed_bytes"] = bf16.get("stats", {}).get("streamed_bytes_per_cycle")
        result["speedup_vs_bf16"] = (bf16["step_s"] / result["step_s"]
                                     if bf16.get("step_s") and result["step_s"] else None)
        figures["caps"][str(cap)] = result
        log(f"fp8 at {cap:g} GiB: {result['step_s']:.3f} s/step, S {s_bytes / 1e9:.2f} GB/step "
            f"(bf16 {fmt((result['bf16_streamed_bytes'] or 0) / 1e9, '.2f')}), bound "
            f"{fmt(bound)} s, bf16 {fmt(result['bf16_step_s'])} s/step: "
            f"{fmt(result['speedup_vs_bf16'], '.2f')}x")
    eight = figures["caps"].get(str(8.0), {}).get("speedup_vs_bf16")
    figures["goal_speedup_8"] = goal(None if eight is None else eight >= GOAL_FP8_SPEEDUP_8,
                                     f"fp8 vs bf16 at 8 GiB: {fmt(eight, '.2f')}x "
                                     f"(goal >= {GOAL_FP8_SPEEDUP_8}x)")
    log(f"goal: {figures['goal_speedup_8']}")
    del model
    release_memory()
    return figures


def goal(passed: Optional[bool], note: str = "") -> str:
    verdict = "n/a" if passed is None else ("PASS" if passed else "MISS")
    return f"{verdict}{' ' + note if note else ''}"


def report(figures: Dict[str, Any], caps: List[float]) -> None:
    c = figures.get("compute", {}).get("step_s")
    b = figures.get("h2d", {}).get("gbps_median")
    ddo = figures.get("ddo", {}).get("caps", {})
    anchors = figures.get("diffusers", {})
    goals: List[str] = []
    rows = []
    print()
    print(f"FLUX transformer ({figures['model']['label']}, {figures['model']['bytes'] / GIB:.2f} "
          f"GiB bf16), {figures['inputs']['image_tokens']} image + "
          f"{figures['inputs']['text_tokens']} text tokens, 1 forward per step; median of "
          f"{figures['args']['steps']} steps after {figures['args']['warmup']} warm-up")
    print(f"C  all weights on the GPU (no cap): {fmt(c)} s/step; peak activations "
          f"{fmt(figures.get('compute', {}).get('activation_peak_bytes', 0) / GIB, '.2f')} GiB")
    print(f"B  pinned H2D (torch copy, {figures.get('h2d', {}).get('bytes', 0) / GIB:g} GiB): "
          f"{fmt(b, '.1f')} GB/s")
    print()
    header = (f"{'cap':>5} {'DDO s':>7} {'S GB':>7} {'S/B s':>7} {'bound':>7} {'DDO/bd':>7} "
              f"{'H2D GB/s':>9} {'us/unit':>8} {'block s':>8} {'leaf s':>8} {'best/DDO':>9}")
    print(header)
    for cap in caps:
        d = ddo.get(str(cap), {})
        step = d.get("step_s")
        s_bytes = d.get("stats", {}).get("streamed_bytes_per_cycle")
        s_over_b = s_bytes / (b * 1e9) if (s_bytes is not None and b) else None
        bound = max(c, s_over_b) if (c is not None and s_over_b is not None) else None
        ratio = step / bound if (step and bound) else None
        achieved = s_bytes / step / 1e9 if (step and s_bytes is not None) else None
        overhead = d.get("stats", {}).get("overhead_us_per_unit")
        block = anchors.get("block_level", {}).get("caps", {}).get(str(cap), {}).get("step_s")
        leaf = anchors.get("leaf_level", {}).get("caps", {}).get(str(cap), {}).get("step_s")
        best = min([t for t in (block, leaf) if t is not None], default=None)
        speedup = best / step if (best and step) else None
        row = {"cap_gib": cap, "ddo_step_s": step, "streamed_bytes_per_step": s_bytes,
               "s_over_b_s": s_over_b, "bound_s": bound, "ddo_over_bound": ratio,
               "achieved_h2d_gbps": achieved, "overhead_us_per_unit": overhead,
               "block_level_step_s": block, "leaf_level_step_s": leaf,
               "best_diffusers_over_ddo": speedup, "ddo_error": d.get("error")}
        rows.append(row)
        print(f"{cap:>5g} {fmt(step):>7} {fmt(s_bytes / 1e9 if s_bytes is not None else None, '.2f'):>7} "
              f"{fmt(s_over_b):>7} {fmt(bound):>7} {fmt(ratio, '.2f'):>7} "
              f"{fmt(achieved, '.1f'):>9} {fmt(overhead, '.1f'):>8} {fmt(block):>8} "
              f"{fmt(leaf):>8} {fmt(speedup, '.2f'):>9}")
        for name, entry in (("DDO", d),
                            ("block_level", anchors.get("block_level", {}).get("caps", {}).get(str(cap), {})),
                            ("leaf_level", anchors.get("leaf_level", {}).get("caps", {}).get(str(cap), {}))):
            if entry.get("error"):
                print(f"      {name} at {cap:g} GiB: {entry['error']}")
        goals.append(f"step within {GOAL_BOUND_RATIO:.2f}x of max(C, S/B) at {cap:g} GiB: "
                     f"{fmt(ratio, '.2f')}x -> {goal(None if ratio is None else ratio <= GOAL_BOUND_RATIO)}")
        goals.append(f"faster than the best diffusers offload at {cap:g} GiB: "
                     f"{fmt(speedup, '.2f')}x -> {goal(None if speedup is None else speedup > 1.0)}")
        if cap == 16:
            goals.append(f">= {GOAL_SPEEDUP_16:g}x the best diffusers offload at 16 GiB: "
                         f"{fmt(speedup, '.2f')}x -> "
                         f"{goal(None if speedup is None else speedup >= GOAL_SPEEDUP_16)}")
        if achieved is not None and b:
            share = achieved / b
            note = ("(compute-bound here: S/B < C, so the copy engine idles by design)"
                    if (s_over_b is not None and c is not None and s_over_b < c) else "")
            goals.append(f"achieved H2D >= {GOAL_H2D_SHARE:.0%} of B at {cap:g} GiB: "
                         f"{share:.0%} -> {goal(share >= GOAL_H2D_SHARE, note)}")
        else:
            goals.append(f"achieved H2D >= {GOAL_H2D_SHARE:.0%} of B at {cap:g} GiB: n/a")
    figures["summary"] = rows
    print("  S: streamed bytes per step (session statistics streamed_bytes_per_cycle); bound = "
          "max(C, S/B); H2D = S / DDO step; best/DDO = fastest diffusers anchor / DDO")
    print("  DDO cap: ddod's slab+ring (DDO_VRAM_BUDGET_GB) + the runner's allocations "
          "(memory fraction) <= cap; diffusers cap: memory fraction = cap / total")

    print()
    for kind in ("block_level", "leaf_level"):
        a = anchors.get(kind)
        if a:
            print(f"diffusers {kind}: setup {fmt(a.get('setup_s'), '.1f')} s, first step "
                  f"{fmt(a.get('first_step_s'))} s{'; ' + a['error'] if a.get('error') else ''}")
    warm = figures.get("warm", {})
    cold = figures.get("cold", {})
    if warm.get("median"):
        w = warm["median"]
        print(f"warm start (fresh process, component in ddod, cap {warm['cap_gib']:g} GiB, median "
              f"of {len(warm['runs'])}): imports {w['imports_s']:.2f} s (interpreter, torch, "
              f"diffusers, ddo client), then {w['after_imports_to_first_step_s']:.3f} s to the "
              f"first finished step (skeleton {w['build_meta_model_s']:.3f}, connect "
              f"{w['connect_s']:.3f}, session "
              f"{w['open_session_s']:.3f}, step {w['first_step_s']:.3f}); "
              f"{w['spawn_to_first_step_s']:.2f} s in all; second step {w['second_step_s']:.3f} s")
        first_stats = warm["runs"][0].get("stats_after_first_step", {})
        print(f"  warm runner's first step: sync uses {first_stats.get('sync_uses', '?')}, "
              f"streamed uses {first_stats.get('streamed_uses', '?')} (a known schedule streams "
              f"from the first use: no learning forward)")
        goals.append(f"warm first step within {GOAL_WARM_S:g} s after imports: "
                     f"{w['after_imports_to_first_step_s']:.3f} s -> "
                     f"{goal(w['after_imports_to_first_step_s'] <= GOAL_WARM_S)}")
    elif warm.get("error"):
        print(f"warm start: {warm['error']}")
        goals.append(f"warm first step within {GOAL_WARM_S:g} s after imports: n/a ({warm['error'][:80]})")
    if cold:
        print("cold start, defined as: from the model's weights already in this process's RAM "
              "(CPU, pageable; imports and reading files from disk NOT included, which favours "
              "the cold figures) to the first finished step:")
        for name, entry in cold.items():
            print(f"  {name}: {fmt(entry.get('seconds'), '.2f')} s  ({entry['definition']})")
        if warm.get("median"):
            after = warm["median"]["after_imports_to_first_step_s"]
            anchors_cold = [e["seconds"] for n, e in cold.items() if n.startswith("diffusers")]
            if anchors_cold:
                print(f"  warm DDO runner (after imports) {after:.3f} s vs the fastest cold "
                      f"diffusers runner {min(anchors_cold):.2f} s: "
                      f"{min(anchors_cold) / after:.1f}x")
    print()
    print("goals:")
    for line in goals:
        print(f"  {line}")
    figures["goals"] = goals


# ---------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__,
        epilog="Memory: the model in RAM (22 GiB) + ddod's pool copy (22 GiB, /dev/shm) + one "
               "pinned copy per diffusers anchor (freed between them). Takes about 3-5 minutes "
               "on an H200 at full size.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ddod", help="the ddod binary (e.g. .bundle/bin/ddod); the caller "
                        "sets LD_LIBRARY_PATH for its libraries. Needed unless --skip-ddo")
    parser.add_argument("--caps", default="8,12,16", help="VRAM caps in GiB (8,12,16)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per figure (5)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="warm-up steps before timing, after a session's first forward (1)")
    parser.add_argument("--resolution", type=int, default=1024, help="image side (1024)")
    parser.add_argument("--text-tokens", type=int, default=512, help="text tokens (512)")
    parser.add_argument("--small", action="store_true",
                        help="2 double + 4 single blocks instead of 19 + 38 (smoke runs)")
    parser.add_argument("--stream-unit", choices=("linear", "block"), default="linear",
                        help="DDO_STREAM_UNIT (linear)")
    parser.add_argument("--activation-reserve-gb", default="auto",
                        help="DDO_ACTIVATION_RESERVE_GB; auto = peak activations measured with "
                             "all weights on the GPU + 1 GiB, rounded up to 0.5 GiB")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="another DDO_* session setting (repeatable)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=VALUE,...",
                        help="after the main DDO runs, run every cap again with these settings "
                             "added (repeatable; e.g. DDO_AUTO_BUDGET_POLICY=balanced,"
                             "DDO_RESIDENT_BUDGET_RULE=seed)")
    parser.add_argument("--h2d-gib", type=float, default=1.0, help="pinned copy size (1 GiB)")
    parser.add_argument("--warm-runs", type=int, default=2, help="fresh warm processes (2)")
    parser.add_argument("--warm-cap", type=float, default=None,
                        help="cap of the warm start runs (default: the largest cap)")
    parser.add_argument("--ddod-arg", action="append", default=[], metavar="ARG",
                        help="an extra ddod argument (repeatable, e.g. --ddod-arg=--log-level=debug)")
    parser.add_argument("--skip-ddo", action="store_true", help="no DDO and no warm start")
    parser.add_argument("--skip-warm", action="store_true", help="no warm start runs")
    parser.add_argument("--skip-diffusers", action="store_true", help="no diffusers anchors")
    parser.add_argument("--no-learned-plan", dest="learned_plan", action="store_false",
                        help="measure the first session of each component, planned before any "
                             "forward (whole blocks spread); by default a first session runs "
                             "one forward so that ddod plans the measured one from it")
    parser.add_argument("--fp8", action="store_true",
                        help="also run the model with fp8 layerwise-casting storage (see above)")
    parser.add_argument("--fp8-caps", default="8", help="VRAM caps of the fp8 runs in GiB (8)")
    parser.add_argument("--json-out", default="", help="write every figure here as JSON")
    args = parser.parse_args()

    caps = sorted((float(c) for c in args.caps.split(",") if c.strip()), reverse=True)
    if not caps or any(c <= 0 for c in caps):
        fail(f"--caps {args.caps!r}: give positive GiB values")
    if args.steps < 1 or args.warmup < 0:
        fail("--steps must be >= 1 and --warmup >= 0")
    if args.resolution % 16:
        fail("--resolution must be a multiple of 16")
    if not args.skip_ddo and not args.ddod:
        fail("--ddod is required (or --skip-ddo)")

    import torch

    if not torch.cuda.is_available():
        fail("no CUDA device: this benchmark runs on the GPU machine")
    import_flux()
    torch.cuda.set_device(0)
    props = torch.cuda.get_device_properties(0)
    total = props.total_memory
    config = dict(SMALL_CONFIG if args.small else FULL_CONFIG)
    figures: Dict[str, Any] = {
        "args": vars(args),
        "machine": {"gpu": props.name, "gpu_total_bytes": total, "cpus": os.cpu_count(),
                    "torch": torch.__version__, "python": platform.python_version(),
                    "host": platform.node()},
        "model": {"class": "FluxTransformer2DModel", "config": config,
                  "label": "small smoke config" if args.small else "FLUX.1-dev size"},
        "inputs": {"image_tokens": (args.resolution // 16) ** 2, "text_tokens": args.text_tokens,
                   "resolution": args.resolution},
    }
    try:
        import diffusers

        figures["machine"]["diffusers"] = diffusers.__version__
    except Exception:  # noqa: BLE001
        pass
    log(f"{props.name}, {total / GIB:.1f} GiB; torch {torch.__version__}; caps {caps} GiB")

    def finish() -> None:
        if args.json_out:
            Path(args.json_out).write_text(json.dumps(figures, indent=1, default=str))
            log(f"wrote {args.json_out}")

    # 1. The model on the GPU: compute time C; bandwidth B.
    log(f"building {figures['model']['label']} on the GPU with random weights...")
    model = random_flux_on_gpu(config, "cuda")
    model_bytes = parameter_bytes(model)
    figures["model"]["bytes"] = model_bytes
    figures["model"]["parameters"] = sum(p.numel() for p in model.parameters())
    log(f"model: {figures['model']['parameters'] / 1e9:.2f} B parameters, "
        f"{model_bytes / GIB:.2f} GiB")
    inputs = make_inputs(args.resolution, args.text_tokens, "cuda")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    compute_times = time_steps(step_fn(model, inputs), max(1, args.warmup), args.steps)
    activation_peak = torch.cuda.max_memory_allocated() - base
    figures["compute"] = {"steps_s": compute_times, "step_s": median(compute_times),
                          "activation_peak_bytes": activation_peak}
    log(f"C = {figures['compute']['step_s']:.3f} s/step (all weights on the GPU); peak "
        f"activations {activation_peak / GIB:.2f} GiB")
    figures["h2d"] = pinned_h2d_gbps(int(args.h2d_gib * GIB), 7)
    log(f"B = {figures['h2d']['gbps_median']:.1f} GB/s pinned H2D")
    if args.activation_reserve_gb == "auto":
        reserve = math.ceil((activation_peak / GIB + 1.0) * 2) / 2
    else:
        reserve = float(args.activation_reserve_gb)
    figures["activation_reserve_gib"] = reserve
    log(f"DDO_ACTIVATION_RESERVE_GB = {reserve:g}")

    log("moving the weights to the CPU (pageable)...")
    started = time.perf_counter()
    torch.nn.Module.to(model, "cpu")
    release_memory()
    host = host_tensors(model)
    figures["model"]["to_cpu_s"] = time.perf_counter() - started
    log(f"on the CPU after {figures['model']['to_cpu_s']:.1f} s")

    # 2. DDO at every cap, then warm starts.
    if not args.skip_ddo:
        from diffusers_dynamic_offloader import DdoClient
        from diffusers_dynamic_offloader._proto import info_pb2

        work = Path(tempfile.mkdtemp(prefix="ddo-flux-", dir="/tmp"))
        ddod = Ddod(args.ddod, work, args.ddod_arg)
        figures["ddo"] = {"caps": {}, "work_dir": str(work)}
        try:
            client = DdoClient.connect(ddod.address, timeout=600)
            info = client.info()
            figures["ddo"]["backend"] = info.backend_detail
            if info.backend != info_pb2.BACKEND_CUDA:
                fail(f"ddod runs the {info_pb2.Backend.Name(info.backend)} backend "
                     f"({info.backend_detail}); the benchmark needs CUDA")
            log(f"ddod {info.version} pid {info.pid}: {info.backend_detail}")
            log(f"registering the model ({model_bytes / GIB:.1f} GiB) into ddod's pool...")
            started = time.perf_counter()
            component = client.register_module(KEY, model, progress=False)
            figures["ddo"]["register_s"] = time.perf_counter() - started
            figures["ddo"]["component_bytes"] = component.total_bytes
            log(f"registered in {figures['ddo']['register_s']:.1f} s "
                f"(warm hit: {component.warm_hit})")
            def run(cap: float, settings: Dict[str, str], label: str,
                    describe: Callable[[Dict[str, Any]], str]) -> Dict[str, Any]:
                """One DDO session at `cap`; a failure is recorded and the run goes on.
                Every run starts from the same host tensors."""
                try:
                    result = ddo_at_cap(client, model, inputs, cap, settings, total, args)
                    log(f"{label} at {cap:g} GiB: {describe(result)}")
                except Exception as error:  # noqa: BLE001 - recorded, the run goes on
                    result = {"cap_gib": cap, "settings": settings, "error": describe_error(error)}
                    log(f"{label} at {cap:g} GiB: {result['error']}")
                    traceback.print_exc()
                    set_fraction(1.0)
                    release_memory()
                restore_parameters(model, host)
                return result

            def main_line(result: Dict[str, Any]) -> str:
                return (f"{result['step_s']:.3f} s/step (session "
                        f"{result['session_device_bytes'] / GIB:.2f} GiB on the device, open "
                        f"{result['open_s']:.2f} s, first forward {result['first_forward_s']:.2f} "
                        f"s; streamed {result['stats'].get('streamed_bytes_per_cycle', 0) / 1e9:.2f}"
                        f" GB/step; sync uses while timed "
                        f"{result['stats_timed_delta'].get('sync_uses', '?')})")

            def variant_line(result: Dict[str, Any]) -> str:
                return (f"{result['step_s']:.3f} s/step, resident "
                        f"{result['stats'].get('resident_bytes', 0) / GIB:.2f} GiB, streamed "
                        f"{result['stats'].get('streamed_bytes_per_cycle', 0) / 1e9:.2f} GB/step; "
                        f"rule: {_decision(result['plan'], 'resident_budget_rule')}")

            first_open = None
            for cap in caps:
                result = run(cap, ddo_settings(cap, reserve, args), "DDO", main_line)
                if "error" not in result:
                    first_open = first_open or result
                figures["ddo"]["caps"][str(cap)] = result
            figures["ddo"]["variants"] = {}
            for variant in args.variant:
                extra = dict(item.split("=", 1) for item in variant.split(",") if item)
                figures["ddo"]["variants"][variant] = {
                    str(cap): run(cap, {**ddo_settings(cap, reserve, args), **extra},
                                  f"variant {variant}", variant_line)
                    for cap in caps}
            if first_open is not None:
                figures["cold"] = {"ddo": {
                    "seconds": figures["ddo"]["register_s"] + first_open["open_s"]
                    + first_open["first_forward_s"],
                    "definition": f"register_module upload into ddod's pool "
                                  f"{figures['ddo']['register_s']:.2f} s + open session "
                                  f"{first_open['open_s']:.2f} s + learning forward "
                                  f"{first_open['first_forward_s']:.2f} s at "
                                  f"{first_open['cap_gib']:g} GiB"}}
            restore_parameters(model, host)
            release_memory()
            if args.fp8:
                figures["fp8"] = fp8_runs(
                    client, config, inputs,
                    sorted((float(c) for c in args.fp8_caps.split(",") if c.strip()),
                           reverse=True),
                    reserve, total, figures["h2d"]["gbps_median"], figures["ddo"]["caps"], args)
                finish()
            if not args.skip_warm:
                warm_cap = args.warm_cap if args.warm_cap is not None else caps[0]
                try:
                    figures["warm"] = warm_start(ddod.address, config,
                                                 ddo_settings(warm_cap, reserve, args),
                                                 warm_cap, args)
                except Exception as error:  # noqa: BLE001
                    figures["warm"] = {"cap_gib": warm_cap, "error": describe_error(error)}
                    log(f"warm start failed: {error}")
            client.close()
        finally:
            code = ddod.stop()
            figures["ddo"]["ddod_exit"] = code
            figures["ddo"]["ddod_log_tail"] = ddod.log_tail(2000)
            log(f"ddod stopped (exit {code}); its pool is discarded")
        release_memory()
        finish()

    # 3. diffusers group offloading, each set up once and timed under every cap.
    if not args.skip_diffusers:
        figures["diffusers"] = {}
        for kind in ("block_level", "leaf_level"):
            try:
                figures["diffusers"][kind] = diffusers_anchor(model, host, inputs, kind, caps,
                                                              total, args)
            except Exception as error:  # noqa: BLE001
                figures["diffusers"][kind] = {"error": describe_error(error), "caps": {}}
                log(f"diffusers {kind} failed: {error}")
                traceback.print_exc()
                restore_parameters(model, host)
                release_memory()
            a = figures["diffusers"][kind]
            if a.get("setup_s") is not None and a.get("first_step_s") is not None:
                figures.setdefault("cold", {})[f"diffusers {kind}"] = {
                    "seconds": a["setup_s"] + a["first_step_s"],
                    "definition": f"apply_group_offloading setup {a['setup_s']:.2f} s (pins a "
                                  f"copy of every weight) + first step {a['first_step_s']:.2f} s "
                                  f"at {caps[0]:g} GiB"}
            finish()

    report(figures, caps)
    finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
