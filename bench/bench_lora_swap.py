#!/usr/bin/env python3
"""LoRA hot swap on a FLUX.1-dev-size transformer streamed by DDO, against diffusers' group
offloading (issue 14, item 5).

One run on one GPU, for a FluxTransformer2DModel(guidance_embeds=True) with random bf16 weights
(22.2 GiB at full size; built as bench_flux_stream.py builds it), 1024x1024 (4096 image tokens)
and 512 text tokens, one forward per step, under a VRAM cap (12 GiB by default):

  * two rank-64 LoRAs ("a" and "b") on every attention and feed-forward Linear of the double
    and single blocks, made by PEFT from a random init (LoraConfig(init_lora_weights=False):
    B is not zero), saved in diffusers' format (FluxPipeline.save_lora_weights, safetensors,
    bf16) and loaded with diffusers' transformer.load_lora_adapter;
  * C: seconds per step with every weight on the GPU (no cap, no adapter); B: pinned H2D;
  * DDO (--parts ddo): enable_offload on the DDO route with DDO_VRAM_BUDGET_GB=cap (ddod's slab
    and ring) and the runner's own allocations capped by
    torch.cuda.set_per_process_memory_fraction to (cap - the session's device bytes) / total,
    as bench_flux_stream does; the adapters are loaded after enable_offload and live on the
    GPU inside the runner's share (DDO_ACTIVATION_RESERVE_GB = activation peak + the adapters'
    bytes + 1 GiB). Measured:
      (a) unfused switch: set_adapters("b") / set_adapters("a") / set_adapters(["a", "b"],
          [0.6, 0.4]), then res.hook.sync_edits(), wall time (median of --switches each), and
          the base-weight bytes uploaded meanwhile (ddod's pool reserved bytes, derived
          components and res.hook.last_sync: must be 0);
      (b) fused switch: unfuse_lora() of a, fuse_lora(adapter_names=["b"]), then
          res.hook.sync_edits(), wall time, split into its parts, against the time of copying
          the changed bytes once on the host (a torch copy of a --copy-gib chunk in this run,
          scaled to the bytes of every weight the LoRA changes), and the ratio; then switches
          back and forth (to a, b, a: unfuse, fuse, sync), with the same ratio, and the step
          time with a fused LoRA. --fused-lora on_arrival (DDO_FUSED_LORA, the default): the
          fuse records the adapter and each weight gets its delta on the GPU as it arrives
          (fused_on_arrival.py); stored: ddod stores a derived version with the changed
          tensors (edit_sync.py; a switch back binds the version stored before);
      (c) step time with adapter a active (unfused) against the step without adapters;
  * diffusers group offloading (--parts group): apply_group_offloading (--group-kind,
    block_level: 1 block per group, use_stream, record_stream, as bench_flux_stream's anchor;
    or leaf_level with use_stream), runner capped by memory fraction cap / total, the same
    LoRAs loaded with load_lora_adapter (diffusers re-applies its offloading around each load),
    the same unfused switches and steps.

Every step time is the median of --steps steps after --warmup warm-up steps. Prints a table and
the goals with PASS/MISS, and writes every figure as JSON (--json-out; default
$OUT/lora_swap.json when $OUT is set). The group part runs first (it needs the weights in
pageable RAM, and the DDO part's derived versions need RAM of their own).

    LD_LIBRARY_PATH=.bundle/lib PYTHONPATH=.device-deps/src:client-python/src \\
        python3 bench/bench_lora_swap.py --ddod .bundle/bin/ddod --parts group,ddo

--small builds a 2 + 4 block model for a quick smoke run of the whole script.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_flux_stream as flux  # noqa: E402  (also puts client-python/src, .device-deps/src on sys.path)

GIB = 1 << 30
STARTED = time.perf_counter()
KEY = "bench/flux-dev-random-lora:bf16"

#: Every attention and feed-forward Linear of the double and single blocks (a PEFT regex on
#: the whole module path; the final proj_out and the embedders are left out).
LORA_TARGETS = (r".*transformer_blocks\.\d+\.(attn\.(to_q|to_k|to_v|to_out\.0|add_q_proj|"
                r"add_k_proj|add_v_proj|to_add_out)|ff\.net\.(0\.proj|2)|"
                r"ff_context\.net\.(0\.proj|2)|proj_mlp|proj_out)")

GOAL_SWITCH_S = 0.1
GOAL_FUSED_OVER_COPY = 1.5
GOAL_ADAPTER_STEP = 1.10


def log(message: str) -> None:
    print(f"[{time.perf_counter() - STARTED:7.1f}s] {message}", flush=True)


def median(values: List[float]) -> Optional[float]:
    return statistics.median(values) if values else None


fmt = flux.fmt


def synced(action: Callable[[], Any]) -> float:
    """Wall seconds of ``action`` up to the device being idle."""
    import torch

    torch.cuda.synchronize()
    started = time.perf_counter()
    action()
    torch.cuda.synchronize()
    return time.perf_counter() - started


# ---------------------------------------------------------------------------------------------
# The LoRAs.


def make_loras(model, rank: int, work: Path) -> Dict[str, Dict[str, Any]]:
    """Two LoRAs made by PEFT on the model (on the GPU) from a random init, saved in diffusers'
    format in bf16; the PEFT layers are removed again afterwards."""
    import torch
    from diffusers import FluxPipeline
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    made = {}
    for name, seed in (("a", 1), ("b", 2)):
        started = time.perf_counter()
        config = LoraConfig(r=rank, lora_alpha=rank, target_modules=LORA_TARGETS,
                            init_lora_weights=False)
        torch.manual_seed(seed)
        model.add_adapter(config, adapter_name=f"made_{name}")
        state = {key: value.detach().to(torch.bfloat16).contiguous()
                 for key, value in get_peft_model_state_dict(
                     model, adapter_name=f"made_{name}").items()}
        model.unload_lora()  # back to plain Linears
        directory = work / f"lora_{name}"
        FluxPipeline.save_lora_weights(directory, transformer_lora_layers=state)
        path = directory / "pytorch_lora_weights.safetensors"
        layers = sum(1 for key in state if key.endswith("lora_A.weight"))
        numel = sum(value.numel() for value in state.values())
        made[name] = {"path": str(path), "file_bytes": path.stat().st_size, "layers": layers,
                      "parameters": numel, "made_s": time.perf_counter() - started}
        log(f"LoRA {name}: rank {rank} on {layers} Linears, {numel / 1e6:.1f} M parameters, "
            f"{path.stat().st_size / 2**20:.0f} MiB file, made in {made[name]['made_s']:.1f} s")
        del state
        flux.release_memory()
    return made


def load_loras(model, loras: Dict[str, Dict[str, Any]]) -> Dict[str, float]:
    seconds = {}
    for name, lora in loras.items():
        path = Path(lora["path"])
        seconds[name] = synced(lambda: model.load_lora_adapter(
            str(path.parent), weight_name=path.name, prefix="transformer", adapter_name=name))
    return seconds


def adapter_summary(model) -> Dict[str, Any]:
    import torch

    found = [(n, p) for n, p in model.named_parameters() if "lora_" in n]
    return {"tensors": len(found),
            "bytes": sum(p.numel() * p.element_size() for _, p in found),
            "dtypes": sorted({str(p.dtype) for _, p in found}),
            "devices": sorted({str(p.device) for _, p in found}),
            "on_cuda": all(p.device.type == "cuda" for _, p in found) if found else None,
            "torch": torch.__version__}


# ---------------------------------------------------------------------------------------------
# Measurements shared by both routes.


def steps_with(step: Callable[[], None], args) -> Dict[str, Any]:
    times = flux.time_steps(step, args.warmup, args.steps)
    return {"steps_s": times, "step_s": median(times)}


def unfused_switches(model, args, after_switch: Callable[[], None]) -> Dict[str, Any]:
    """Median wall time of each kind of unfused switch (set_adapters, then ``after_switch``,
    e.g. the session's sync_edits), alternating so that every call changes something."""
    kinds = {
        "set_adapters('b')": lambda: model.set_adapters("b"),
        "set_adapters('a')": lambda: model.set_adapters("a"),
        "set_adapters(['a', 'b'], [0.6, 0.4])":
            lambda: model.set_adapters(["a", "b"], [0.6, 0.4]),
    }
    times: Dict[str, List[float]] = {kind: [] for kind in kinds}
    for _ in range(args.switches):
        for kind, switch in kinds.items():
            times[kind].append(synced(lambda: (switch(), after_switch())))
    model.set_adapters("a")
    after_switch()
    return {kind: {"median_s": median(values), "all_s": values} for kind, values in times.items()}


def fused_weight_bytes(model, adapter: str) -> int:
    """Bytes of the base weights of every LoRA layer that has ``adapter``."""
    total = 0
    for module in model.modules():
        if adapter in getattr(module, "lora_A", {}) and hasattr(module, "base_layer"):
            weight = module.base_layer.weight
            total += weight.numel() * weight.element_size()
    return total


def host_copy_gbps(chunk_bytes: int, repeats: int = 3) -> Dict[str, Any]:
    """A host-to-host torch copy (pageable memory, pages touched first), bytes per second."""
    import torch

    source = torch.ones(chunk_bytes, dtype=torch.uint8)
    target = torch.zeros(chunk_bytes, dtype=torch.uint8)
    rates = []
    for _ in range(repeats):
        started = time.perf_counter()
        target.copy_(source)
        rates.append(chunk_bytes / (time.perf_counter() - started) / 1e9)
    del source, target
    return {"chunk_bytes": chunk_bytes, "gbps_median": median(rates), "gbps_all": rates}


# ---------------------------------------------------------------------------------------------
# DDO.


def ddo_part(model, inputs, loras, cap: float, reserve: float, total: int, args,
             figures: Dict[str, Any]) -> None:
    import diffusers_dynamic_offloader as ddo
    from diffusers_dynamic_offloader._proto import info_pb2

    result_figures: Dict[str, Any] = {"cap_gib": cap, "activation_reserve_gib": reserve}
    figures["ddo"] = result_figures
    work = Path(tempfile.mkdtemp(prefix="ddo-lora-", dir="/tmp"))
    daemon = flux.Ddod(args.ddod, work, args.ddod_arg)
    result = None
    try:
        client = ddo.DdoClient.connect(daemon.address, timeout=600)
        info = client.info()
        if info.backend != info_pb2.BACKEND_CUDA:
            flux.fail(f"ddod runs the {info_pb2.Backend.Name(info.backend)} backend "
                      f"({info.backend_detail}); the benchmark needs CUDA")
        settings = {"DDO_VRAM_BUDGET_GB": f"{cap:g}", "DDO_ACTIVATION_RESERVE_GB": f"{reserve:g}",
                    "DDO_STREAM_UNIT": args.stream_unit, "DDO_FUSED_LORA": args.fused_lora}
        result_figures["settings"] = settings
        flux.set_fraction(1.0)
        log(f"DDO: enable_offload at a {cap:g} GiB cap ({settings})...")
        started = time.perf_counter()
        result = ddo.enable_offload(model, route="dynamic_offload", execution_device="cuda:0",
                                    cache_key=KEY, client=client, environ=settings)
        result_figures["enable_offload_s"] = time.perf_counter() - started
        hook = result.hook
        result_figures["plan"] = flux.plan_summary(getattr(hook, "plan", None))
        device_bytes = flux.session_device_bytes(client, hook, os.getpid())
        runner_bytes = int(cap * GIB) - device_bytes
        if runner_bytes <= 0:
            raise RuntimeError(f"ddod's session uses {device_bytes / GIB:.2f} GiB, more than "
                               f"the {cap:g} GiB cap")
        result_figures["session_device_bytes"] = device_bytes
        result_figures["runner_fraction"] = runner_bytes / total
        flux.set_fraction(runner_bytes / total)
        log(f"DDO: set up in {result_figures['enable_offload_s']:.1f} s; session "
            f"{device_bytes / GIB:.2f} GiB on the device, runner {runner_bytes / GIB:.2f} GiB")
        step = flux.step_fn(model, inputs)

        def pool() -> Dict[str, Any]:
            return {"reserved_bytes": client.stats().pool.reserved_bytes,
                    "derived": sorted(c.cache_key for c in client.components()
                                      if getattr(c, "base_cache_key", "") == KEY)}

        # (c) without adapters.
        result_figures["first_forward_s"] = flux.time_step(step)
        result_figures["no_adapter"] = steps_with(step, args)
        result_figures["stats"] = flux.numeric(hook.stats())
        log(f"DDO: no adapter {result_figures['no_adapter']['step_s']:.3f} s/step; streamed "
            f"{result_figures['stats'].get('streamed_bytes_per_cycle', 0) / 1e9:.2f} GB/step")

        # Adapters, unfused.
        result_figures["load_lora_s"] = load_loras(model, loras)
        result_figures["adapters"] = adapter_summary(model)
        log(f"DDO: LoRAs loaded in {result_figures['load_lora_s']}; adapters "
            f"{result_figures['adapters']}")
        model.set_adapters("a")
        hook.sync_edits()
        result_figures["adapter_a"] = steps_with(step, args)
        log(f"DDO: adapter a active {result_figures['adapter_a']['step_s']:.3f} s/step")

        # (a) unfused switches.
        before = pool()
        key_before = hook.cache_key
        uploads: List[int] = []

        def sync_and_count() -> None:
            hook.sync_edits()
            uploads.append(int((hook.last_sync or {}).get("uploaded_bytes", 0)))

        result_figures["unfused_switch"] = unfused_switches(model, args, sync_and_count)
        result_figures["step_after_switches_s"] = flux.time_step(step)
        sync_and_count()
        after = pool()
        result_figures["unfused_switch_pool"] = {"before": before, "after": after,
                                                 "last_sync": dict(hook.last_sync or {}),
                                                 "cache_key_before": key_before,
                                                 "cache_key_after": hook.cache_key}
        # What the syncs uploaded, and what ddod's pool grew by (the same bytes, seen twice):
        # both must be 0, and the session must still stream the base itself.
        uploaded = max(sum(uploads), after["reserved_bytes"] - before["reserved_bytes"])
        result_figures["unfused_switch_base_bytes_uploaded"] = uploaded
        result_figures["unfused_switch_key_changed"] = hook.cache_key != key_before
        result_figures["unfused_switch_new_derived"] = sorted(set(after["derived"])
                                                              - set(before["derived"]))
        log(f"DDO: unfused switches {json.dumps({k: round(v['median_s'], 4) for k, v in result_figures['unfused_switch'].items()})}; "
            f"base bytes uploaded {uploaded}")

        # (b) fused switch.
        if not args.skip_fused:
            fused: Dict[str, Any] = {}
            result_figures["fused"] = fused
            model.set_adapters("a")
            fused["first_fuse_a_s"] = synced(lambda: model.fuse_lora(adapter_names=["a"]))
            fused["first_sync_a_s"] = synced(hook.sync_edits)
            fused["first_sync_a"] = dict(hook.last_sync or {})
            fused["fused_a_step_s"] = flux.time_step(step)
            log(f"DDO: fused a: fuse {fused['first_fuse_a_s']:.2f} s, sync "
                f"{fused['first_sync_a_s']:.2f} s ({fused['first_sync_a']}), step "
                f"{fused['fused_a_step_s']:.3f} s")
            from diffusers_dynamic_offloader.shared_weights import edit_seconds

            parts = {}
            edit_seconds(reset=True)
            parts["unfuse_a_s"] = synced(model.unfuse_lora)
            fused["unfuse_edit_seconds"] = edit_seconds(reset=True)
            parts["fuse_b_s"] = synced(lambda: model.fuse_lora(adapter_names=["b"]))
            fused["fuse_edit_seconds"] = edit_seconds(reset=True)
            parts["sync_s"] = synced(hook.sync_edits)
            log(f"DDO: where the switch went: unfuse {fused['unfuse_edit_seconds']}, fuse "
                f"{fused['fuse_edit_seconds']}, sync {(hook.last_sync or {}).get('parts')}")
            fused["switch_parts"] = parts
            fused["switch_s"] = sum(parts.values())
            fused["switch_sync"] = dict(hook.last_sync or {})
            fused["fused_b_step_s"] = flux.time_step(step)
            fused["fused_b_steps"] = steps_with(step, args)
            fused["session_stats"] = flux.numeric(hook.stats())
            # The bytes a fused switch changes: every weight with adapter b (the copy a
            # stored switch makes, and what an on-arrival one avoids).
            changed = fused_weight_bytes(model, "b")
            fused["uploaded_bytes"] = int(fused["switch_sync"].get("uploaded_bytes", 0))
            fused["changed_bytes"] = changed
            copy = host_copy_gbps(int(min(changed, args.copy_gib * GIB)) or GIB)
            fused["host_copy"] = copy
            fused["copy_once_s"] = changed / (copy["gbps_median"] * 1e9) if changed else None
            fused["ratio"] = (fused["switch_s"] / fused["copy_once_s"]
                              if fused["copy_once_s"] else None)
            fused["components"] = [
                {"cache_key": c.cache_key, "base_cache_key": getattr(c, "base_cache_key", ""),
                 "total_bytes": c.total_bytes, "own_bytes": getattr(c, "own_bytes", None),
                 "changed_tensors": getattr(c, "changed_tensors", None)}
                for c in client.components()]
            log(f"DDO: fused switch a -> b {fused['switch_s']:.2f} s ({parts}); changed "
                f"{changed / GIB:.2f} GiB; host copy {copy['gbps_median']:.1f} GB/s -> copy "
                f"once {fmt(fused['copy_once_s'], '.2f')} s; ratio {fmt(fused['ratio'], '.2f')}")
            # Switching back and forth between the two fused LoRAs, as between generations:
            # each was fused and stored once above.
            fused["switches_back"] = []
            for number, adapter in enumerate(("a", "b", "a", "b")):
                back: Dict[str, Any] = {"to": adapter}
                # The last one runs under cProfile (slower: not in the figures), to show
                # where a switch back spends its time.
                profiler = cProfile.Profile() if number == 3 else None
                if profiler is not None:
                    profiler.enable()
                back["unfuse_s"] = synced(model.unfuse_lora)
                back["fuse_s"] = synced(lambda: model.fuse_lora(adapter_names=[adapter]))
                back["sync_s"] = synced(hook.sync_edits)
                if profiler is not None:
                    profiler.disable()
                    text = io.StringIO()
                    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
                    fused["switch_back_profile"] = text.getvalue()
                    log("DDO: switch back under cProfile (not timed), by own time:\n"
                        + text.getvalue())
                    edit_seconds(reset=True)
                    continue
                back["edit_seconds"] = edit_seconds(reset=True)
                back["sync"] = dict(hook.last_sync or {})
                back["switch_s"] = back["unfuse_s"] + back["fuse_s"] + back["sync_s"]
                back["ratio"] = (back["switch_s"] / fused["copy_once_s"]
                                 if fused["copy_once_s"] else None)
                back["step_s"] = flux.time_step(step)
                fused["switches_back"].append(back)
                log(f"DDO: fused switch back to {adapter}: {back['switch_s']:.3f} s (unfuse "
                    f"{back['unfuse_s']:.3f}, fuse {back['fuse_s']:.3f}, sync "
                    f"{back['sync_s']:.3f}: {back['sync'].get('parts')}); uploaded "
                    f"{back['sync'].get('uploaded_bytes')} B; ratio {fmt(back['ratio'], '.2f')}; "
                    f"step {back['step_s']:.3f} s")
            fused["switch_back_median_s"] = median(
                [back["switch_s"] for back in fused["switches_back"]])
        result_figures["session_stats"] = flux.numeric(hook.stats())
    except Exception as error:  # noqa: BLE001 - recorded, the run goes on
        result_figures["error"] = flux.describe_error(error)
        log(f"DDO part failed: {result_figures['error']}")
        traceback.print_exc()
    finally:
        flux.set_fraction(1.0)
        if result is not None:
            try:
                started = time.perf_counter()
                result.release()
                result_figures["release_s"] = time.perf_counter() - started
            except Exception as error:  # noqa: BLE001
                result_figures["release_error"] = flux.describe_error(error)
        code = daemon.stop()
        result_figures["ddod_exit"] = code
        result_figures["ddod_log_tail"] = daemon.log_tail(2000)
        flux.release_memory()


# ---------------------------------------------------------------------------------------------
# diffusers group offloading.


def group_part(model, host, inputs, loras, cap: float, total: int, args,
               figures: Dict[str, Any]) -> None:
    import torch
    from diffusers.hooks import apply_group_offloading

    result_figures: Dict[str, Any] = {"cap_gib": cap, "kind": args.group_kind,
                                      "fraction": cap * GIB / total}
    figures["group"] = result_figures
    options = dict(onload_device=torch.device("cuda:0"), offload_device=torch.device("cpu"),
                   use_stream=True)
    if args.group_kind == "block_level":
        options.update(offload_type="block_level", num_blocks_per_group=1, record_stream=True)
    else:
        options.update(offload_type="leaf_level")
    result_figures["options"] = {k: str(v) for k, v in options.items()}
    try:
        flux.set_fraction(1.0)
        log(f"group: apply_group_offloading({result_figures['options']})")
        result_figures["setup_s"] = synced(lambda: apply_group_offloading(model, **options))
        flux.set_fraction(cap * GIB / total)
        step = flux.step_fn(model, inputs)
        result_figures["first_step_s"] = flux.time_step(step)
        result_figures["no_adapter"] = steps_with(step, args)
        log(f"group: setup {result_figures['setup_s']:.1f} s; no adapter "
            f"{result_figures['no_adapter']['step_s']:.3f} s/step")
        result_figures["load_lora_s"] = load_loras(model, loras)
        result_figures["adapters"] = adapter_summary(model)
        log(f"group: LoRAs loaded in {result_figures['load_lora_s']} (diffusers re-applies "
            f"its offloading around each load)")
        model.set_adapters("a")
        try:
            flux.time_step(step)
        except KeyError as error:
            # diffusers' group offload (use_stream) keeps a pinned copy per parameter it saw
            # when applied: the adapters loaded since are not in it. The workaround a user has:
            # take the offloading off and apply it again with the adapters in place.
            result_figures["step_after_load_error"] = flux.describe_error(error)
            log(f"group: the first step after loading the LoRAs failed "
                f"({result_figures['step_after_load_error'][:80]}); applying group offloading "
                f"again with the adapters in place")
            flux.set_fraction(1.0)
            flux.remove_group_offloading(model)
            result_figures["reapply_s"] = synced(lambda: apply_group_offloading(model, **options))
            flux.set_fraction(cap * GIB / total)
        result_figures["adapter_a"] = steps_with(step, args)
        log(f"group: adapter a active {result_figures['adapter_a']['step_s']:.3f} s/step")
        result_figures["unfused_switch"] = unfused_switches(model, args, lambda: None)
        result_figures["step_after_switches_s"] = flux.time_step(step)
        log(f"group: unfused switches "
            f"{json.dumps({k: round(v['median_s'], 4) for k, v in result_figures['unfused_switch'].items()})}")
        if not args.skip_fused:
            # The same fused switch as the DDO part: fuse a, then unfuse a and fuse b.
            fused: Dict[str, Any] = {}
            result_figures["fused"] = fused
            model.set_adapters("a")
            fused["first_fuse_a_s"] = synced(lambda: model.fuse_lora(adapter_names=["a"]))
            fused["fused_a_step_s"] = flux.time_step(step)
            parts = {"unfuse_a_s": synced(model.unfuse_lora),
                     "fuse_b_s": synced(lambda: model.fuse_lora(adapter_names=["b"]))}
            fused["switch_parts"] = parts
            fused["switch_s"] = sum(parts.values())
            fused["fused_b_step_s"] = flux.time_step(step)
            log(f"group: fused switch a -> b {fused['switch_s']:.2f} s ({parts})")
    except Exception as error:  # noqa: BLE001 - recorded, the run goes on
        result_figures["error"] = flux.describe_error(error)
        log(f"group part failed: {result_figures['error']}")
        traceback.print_exc()
    finally:
        flux.set_fraction(1.0)
        for cleanup in (flux.remove_group_offloading, lambda m: m.unload_lora()):
            try:
                cleanup(model)
            except Exception as error:  # noqa: BLE001
                result_figures.setdefault("cleanup_errors", []).append(flux.describe_error(error))
        flux.restore_parameters(model, host)
        flux.release_memory()


# ---------------------------------------------------------------------------------------------
# Report.


def goal(passed: Optional[bool]) -> str:
    return "n/a" if passed is None else ("PASS" if passed else "MISS")


def report(figures: Dict[str, Any]) -> None:
    c = figures.get("compute", {}).get("step_s")
    b = figures.get("h2d", {}).get("gbps_median")
    d = figures.get("ddo", {})
    g = figures.get("group", {})
    print()
    print(f"FLUX transformer ({figures['model']['label']}, {figures['model']['bytes'] / GIB:.2f} "
          f"GiB bf16), {figures['inputs']['image_tokens']} image + "
          f"{figures['inputs']['text_tokens']} text tokens, 1 forward per step; cap "
          f"{figures['args']['cap']:g} GiB; median of {figures['args']['steps']} steps after "
          f"{figures['args']['warmup']} warm-up; LoRAs rank {figures['args']['rank']} on "
          f"{figures.get('loras', {}).get('a', {}).get('layers', '?')} Linears")
    s_bytes = d.get("stats", {}).get("streamed_bytes_per_cycle")
    s_over_b = s_bytes / (b * 1e9) if (s_bytes and b) else None
    print(f"C  all weights on the GPU (no cap, no adapter): {fmt(c)} s/step")
    print(f"B  pinned H2D: {fmt(b, '.1f')} GB/s; DDO streams S = "
          f"{fmt(s_bytes / 1e9 if s_bytes else None, '.2f')} GB/step -> S/B = {fmt(s_over_b)} s; "
          f"bound max(C, S/B) = {fmt(max(c, s_over_b) if (c and s_over_b) else None)} s")
    print()

    def row(label: str, ddo_value: Any, group_value: Any, spec: str = ".3f") -> None:
        print(f"{label:<56} {fmt(ddo_value, spec):>12} {fmt(group_value, spec):>12}")

    def switch(entry: Dict[str, Any], kind: str) -> Optional[float]:
        return entry.get("unfused_switch", {}).get(kind, {}).get("median_s")

    def ratio(entry: Dict[str, Any]) -> Optional[float]:
        with_adapter = entry.get("adapter_a", {}).get("step_s")
        without = entry.get("no_adapter", {}).get("step_s")
        return with_adapter / without if (with_adapter and without) else None

    print(f"{'':<56} {'DDO':>12} {'group ' + str(g.get('kind', '')):>12}")
    row("step, no adapter (s)", d.get("no_adapter", {}).get("step_s"),
        g.get("no_adapter", {}).get("step_s"))
    row("step, adapter a unfused (s)", d.get("adapter_a", {}).get("step_s"),
        g.get("adapter_a", {}).get("step_s"))
    row("adapter / no adapter", ratio(d), ratio(g), ".2f")
    for kind in ("set_adapters('b')", "set_adapters('a')", "set_adapters(['a', 'b'], [0.6, 0.4])"):
        row(f"unfused switch {kind} (s)", switch(d, kind), switch(g, kind), ".4f")
    row("first step after the switches (s)", d.get("step_after_switches_s"),
        g.get("step_after_switches_s"))
    row("LoRA load a (s)", d.get("load_lora_s", {}).get("a"), g.get("load_lora_s", {}).get("a"),
        ".2f")
    row("setup (s)", d.get("enable_offload_s"), g.get("setup_s"), ".1f")
    print(f"DDO base bytes uploaded during the unfused switches: "
          f"{d.get('unfused_switch_base_bytes_uploaded', '-')}; new derived components: "
          f"{d.get('unfused_switch_new_derived', '-')}")
    fused = d.get("fused", {})
    if fused:
        print(f"DDO fused switch a -> b: {fmt(fused.get('switch_s'), '.2f')} s "
              f"({ {k: round(v, 2) for k, v in fused.get('switch_parts', {}).items()} }); changed "
              f"{fused.get('changed_bytes', 0) / GIB:.2f} GiB; copying them once on the host "
              f"{fmt(fused.get('copy_once_s'), '.2f')} s "
              f"({fmt(fused.get('host_copy', {}).get('gbps_median'), '.1f')} GB/s); ratio "
              f"{fmt(fused.get('ratio'), '.2f')}; last_sync {fused.get('switch_sync')}")
        for back in fused.get("switches_back", []):
            print(f"DDO fused switch back to {back['to']}: {fmt(back.get('switch_s'), '.3f')} s; "
                  f"uploaded {back.get('sync', {}).get('uploaded_bytes')} B; ratio "
                  f"{fmt(back.get('ratio'), '.2f')}")
        fused_step = fused.get("fused_b_steps", {}).get("step_s")
        without = d.get("no_adapter", {}).get("step_s")
        print(f"DDO step with LoRA b fused ({d.get('settings', {}).get('DDO_FUSED_LORA')}): "
              f"{fmt(fused_step)} s, {fmt(fused_step / without if fused_step and without else None, '.2f')}x "
              f"the step without adapters")
    group_fused = g.get("fused", {})
    if group_fused:
        print(f"group fused switch a -> b: {fmt(group_fused.get('switch_s'), '.2f')} s "
              f"({ {k: round(v, 2) for k, v in group_fused.get('switch_parts', {}).items()} })")
    for name, entry in (("DDO", d), ("group", g)):
        if entry.get("error"):
            print(f"{name}: {entry['error']}")

    goals = []
    switches = [switch(d, kind) for kind in d.get("unfused_switch", {})]
    worst = max(switches) if switches and all(s is not None for s in switches) else None
    uploaded = d.get("unfused_switch_base_bytes_uploaded")
    clean = uploaded == 0 and not d.get("unfused_switch_key_changed", False)
    goals.append(f"unfused switch under {GOAL_SWITCH_S:g} s with 0 base bytes uploaded: slowest "
                 f"{fmt(worst, '.4f')} s, {uploaded if uploaded is not None else '-'} bytes, "
                 f"streamed component changed: {d.get('unfused_switch_key_changed', '-')} -> "
                 f"{goal(None if worst is None or uploaded is None else worst < GOAL_SWITCH_S and clean)}")
    r = fused.get("ratio")
    goals.append(f"fused switch to a LoRA never fused before within {GOAL_FUSED_OVER_COPY:g}x "
                 f"copying the changed bytes once: {fmt(r, '.2f')}x -> "
                 f"{goal(None if r is None else r <= GOAL_FUSED_OVER_COPY)}")
    backs = [back.get("ratio") for back in fused.get("switches_back", [])]
    worst_back = max(backs) if backs and all(b is not None for b in backs) else None
    goals.append(f"fused switch back to a LoRA fused before within {GOAL_FUSED_OVER_COPY:g}x "
                 f"copying the changed bytes once: slowest {fmt(worst_back, '.2f')}x -> "
                 f"{goal(None if worst_back is None else worst_back <= GOAL_FUSED_OVER_COPY)}")
    a = ratio(d)
    goals.append(f"step with one unfused rank-{figures['args']['rank']} adapter within "
                 f"{GOAL_ADAPTER_STEP:.2f}x of the step without: {fmt(a, '.2f')}x -> "
                 f"{goal(None if a is None else a <= GOAL_ADAPTER_STEP)}")
    print()
    print("goals:")
    for line in goals:
        print(f"  {line}")
    figures["goals"] = goals


# ---------------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__,
        epilog="Memory: the model in RAM (22 GiB) + ddod's pool (22 GiB base + the derived "
               "versions, /dev/shm) + the runner's private copies of fused weights; group "
               "offloading pins a copy of every weight. About 5-8 minutes on an H200 at full "
               "size with both parts; run them separately with --parts.",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ddod", help="the ddod binary (e.g. .bundle/bin/ddod); the caller "
                        "sets LD_LIBRARY_PATH for its libraries. Needed with --parts ddo")
    parser.add_argument("--parts", default="group,ddo",
                        help="what to run, comma-separated: group, ddo (group,ddo)")
    parser.add_argument("--cap", type=float, default=12.0, help="VRAM cap in GiB (12)")
    parser.add_argument("--rank", type=int, default=64, help="LoRA rank (64)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per figure (3)")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up steps before timing (1)")
    parser.add_argument("--switches", type=int, default=5,
                        help="unfused switches of each kind, timed (5)")
    parser.add_argument("--resolution", type=int, default=1024, help="image side (1024)")
    parser.add_argument("--text-tokens", type=int, default=512, help="text tokens (512)")
    parser.add_argument("--small", action="store_true",
                        help="2 double + 4 single blocks instead of 19 + 38 (smoke runs)")
    parser.add_argument("--stream-unit", choices=("linear", "block"), default="linear",
                        help="DDO_STREAM_UNIT (linear)")
    parser.add_argument("--activation-reserve-gb", default="auto",
                        help="DDO_ACTIVATION_RESERVE_GB; auto = peak activations measured with "
                             "all weights on the GPU + both adapters' bytes (float32) + 1 GiB, "
                             "rounded up to 0.5 GiB")
    parser.add_argument("--group-kind", choices=("block_level", "leaf_level"),
                        default="block_level", help="diffusers group offloading (block_level)")
    parser.add_argument("--copy-gib", type=float, default=2.0,
                        help="host copy measured for the copy-once figure, scaled (2 GiB)")
    parser.add_argument("--h2d-gib", type=float, default=1.0, help="pinned copy size (1 GiB)")
    parser.add_argument("--skip-fused", action="store_true", help="no fused switch (DDO part)")
    parser.add_argument("--fused-lora", choices=("on_arrival", "stored"), default="on_arrival",
                        help="DDO_FUSED_LORA of the DDO part (on_arrival)")
    parser.add_argument("--ddod-arg", action="append", default=[], metavar="ARG",
                        help="an extra ddod argument (repeatable)")
    parser.add_argument("--json-out", default="",
                        help="write every figure here as JSON (default $OUT/lora_swap.json "
                             "when $OUT is set)")
    args = parser.parse_args()

    parts = {part.strip() for part in args.parts.split(",") if part.strip()}
    if not parts or parts - {"ddo", "group"}:
        flux.fail(f"--parts {args.parts!r}: give ddo, group or both")
    if "ddo" in parts and not args.ddod:
        flux.fail("--ddod is required with --parts ddo")
    if args.steps < 1 or args.warmup < 0 or args.switches < 1:
        flux.fail("--steps and --switches must be >= 1, --warmup >= 0")
    if args.resolution % 16:
        flux.fail("--resolution must be a multiple of 16")
    json_out = args.json_out or (os.path.join(os.environ["OUT"], "lora_swap.json")
                                 if os.environ.get("OUT") else "")

    import torch

    if not torch.cuda.is_available():
        flux.fail("no CUDA device: this benchmark runs on the GPU machine")
    flux.import_flux()
    try:
        import peft
    except ImportError as error:
        flux.fail(f"cannot import peft ({error})")
    torch.cuda.set_device(0)
    props = torch.cuda.get_device_properties(0)
    total = props.total_memory
    config = dict(flux.SMALL_CONFIG if args.small else flux.FULL_CONFIG)
    figures: Dict[str, Any] = {
        "args": vars(args),
        "machine": {"gpu": props.name, "gpu_total_bytes": total, "cpus": os.cpu_count(),
                    "torch": torch.__version__, "peft": peft.__version__,
                    "python": platform.python_version(), "host": platform.node()},
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

    def finish() -> None:
        if json_out:
            Path(json_out).parent.mkdir(parents=True, exist_ok=True)
            Path(json_out).write_text(json.dumps(figures, indent=1, default=str))
            log(f"wrote {json_out}")

    log(f"{props.name}, {total / GIB:.1f} GiB; torch {torch.__version__}; peft "
        f"{peft.__version__}; cap {args.cap:g} GiB; parts {sorted(parts)}")
    log(f"building {figures['model']['label']} on the GPU with random weights...")
    model = flux.random_flux_on_gpu(config, "cuda")
    figures["model"]["bytes"] = flux.parameter_bytes(model)
    inputs = flux.make_inputs(args.resolution, args.text_tokens, "cuda")
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    compute = flux.time_steps(flux.step_fn(model, inputs), max(1, args.warmup), args.steps)
    activation_peak = torch.cuda.max_memory_allocated() - base
    figures["compute"] = {"steps_s": compute, "step_s": median(compute),
                          "activation_peak_bytes": activation_peak}
    log(f"C = {figures['compute']['step_s']:.3f} s/step; peak activations "
        f"{activation_peak / GIB:.2f} GiB")
    figures["h2d"] = flux.pinned_h2d_gbps(int(args.h2d_gib * GIB), 7)
    log(f"B = {figures['h2d']['gbps_median']:.1f} GB/s pinned H2D")

    work = Path(tempfile.mkdtemp(prefix="lora-swap-", dir="/tmp"))
    loras = make_loras(model, args.rank, work)
    figures["loras"] = loras
    adapters_fp32 = sum(lora["parameters"] for lora in loras.values()) * 4
    if args.activation_reserve_gb == "auto":
        reserve = math.ceil((activation_peak / GIB + adapters_fp32 / GIB + 1.0) * 2) / 2
    else:
        reserve = float(args.activation_reserve_gb)
    log(f"DDO_ACTIVATION_RESERVE_GB = {reserve:g} (adapters up to {adapters_fp32 / GIB:.2f} GiB)")

    log("moving the weights to the CPU (pageable)...")
    started = time.perf_counter()
    torch.nn.Module.to(model, "cpu")
    flux.release_memory()
    figures["model"]["to_cpu_s"] = time.perf_counter() - started

    if "group" in parts:
        host = flux.host_tensors(model)
        group_part(model, host, inputs, loras, args.cap, total, args, figures)
        del host  # the DDO part must not keep a second copy of the weights alive
        finish()
    if "ddo" in parts:
        ddo_part(model, inputs, loras, args.cap, reserve, total, args, figures)
        finish()
    report(figures)
    finish()
    return 0


if __name__ == "__main__":
    sys.exit(main())
