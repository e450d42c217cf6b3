#!/usr/bin/env python3
"""Diffusers transformers at their published sizes, streamed by DDO through the seed API under
VRAM caps, against diffusers' group offloading (issue 30, item 3).

One invocation measures one architecture (bench/architectures.py: FLUX.1-dev, Wan 2.1 14B,
Wan 2.2 A14B, Qwen-Image, LTX-Video 13B, SD3.5 Large, HunyuanVideo 13B, CogVideoX-5B) with
random weights at the shapes its pipeline runs, one transformer forward per step:

  * the model is built as from_pretrained(torch_dtype=bfloat16) builds it (parameters on the
    meta device, bf16 except the class's _keep_in_fp32_modules; buffers computed on the CPU,
    persistent float buffers in bf16), then filled with normal(0, 0.02) on the GPU;
  * C: seconds per step with every weight on the GPU, and its output: the reference. Two
    all-GPU forwards must agree bitwise (else the kernels are not deterministic and no
    comparison below means anything: reported as reference_repeatable);
  * B: pinned host-to-device bandwidth (bench_flux_stream.pinned_h2d_gbps), the same run;
  * the weights go to ddod's pool (register_module) and the module is bound to the pool's
    zero-copy views (client.attach(key).bind, as load_from_ddod leaves a module), so the host
    holds one copy of the weights (Wan 2.2's two experts: 57 GiB);
  * DDO at each cap and shape: enable_offload(route="dynamic_offload") as a seed runner calls
    it, with DDO_VRAM_BUDGET_GB=cap (ddod's slab and ring) and the runner's own allocations
    capped with set_per_process_memory_fraction to (cap - the session's device bytes) / total,
    as bench_flux_stream does; DDO_ACTIVATION_RESERVE_GB = the shape's activation peak + 1 GiB.
    The output of the last timed step is compared bitwise with the reference. S = streamed
    bytes per step (session statistics); bound = max(C, S/B). Wan 2.2: each cap runs the
    high-noise expert, then the low-noise one (the pipeline's switch: release, enable_offload
    of the other, its first forward);
  * diffusers apply_group_offloading, block_level (1 block per group, use_stream,
    record_stream) and leaf_level (use_stream), set up once each. Their device memory is one
    group (and the prefetched next) plus activations, whatever the cap: the cap only decides
    whether they fit. So by default (--anchor-caps smallest) each shape is timed once, under
    the smallest cap where it runs (memory fraction = cap / total), and that figure stands for
    every larger cap (the table marks it); --anchor-caps all times every cap. Their output
    is compared bitwise too. Wan 2.2: the anchors run the high-noise expert only (same
    architecture; --anchor-experts all for both).

Every step time is the median of --steps steps after --warmup warm-up steps (a DDO session's
first forward, its learning forward, is reported apart). What does not fit is recorded with
its reason. The JSON (--json-out; default $OUT/arch-<name>.json when $OUT is set) is rewritten
after every figure, so a run cut short keeps what it measured.

    LD_LIBRARY_PATH=.bundle/lib PYTHONPATH=.device-deps/src:client-python/src \\
        python3 bench/bench_architectures.py --arch wan2.1 --ddod .bundle/bin/ddod

--smoke: every architecture's layout with one or two blocks, a small shape and caps of 2 and 3
GiB: every code path in about half a minute per architecture (--arch all).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, NoReturn, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import architectures as archs  # noqa: E402
import bench_flux_stream as flux  # noqa: E402  (also puts client-python/src, .device-deps/src on sys.path)

GIB = 1 << 30
log, fmt, median = flux.log, flux.fmt, flux.median


def fail(message: str) -> NoReturn:
    print(f"bench_architectures: {message}", file=sys.stderr, flush=True)
    sys.exit(2)
ANCHOR_KINDS = ("block_level", "leaf_level")


# ---------------------------------------------------------------------------------------------
# The model.


def build_random(architecture: archs.Architecture, config: Dict[str, Any], device: str, seed: int):
    """The transformer as from_pretrained(torch_dtype=bfloat16) would leave it, with
    normal(0, 0.02) weights filled on ``device`` (filling 14 B parameters on the CPU takes
    minutes)."""
    import torch

    from accelerate import init_empty_weights

    model_class = archs.model_class(architecture)
    with init_empty_weights():  # parameters on meta; buffers computed for real, on the CPU
        model = model_class(**config)
    keep_fp32 = tuple(getattr(model_class, "_keep_in_fp32_modules", None) or ())

    def dtype_of(name: str):
        # model_loading_utils.load_model_dict_into_meta: a name with a kept module in its path
        # stays float32, the rest takes torch_dtype.
        return torch.float32 if any(part in keep_fp32 for part in name.split(".")) else torch.bfloat16

    made: Dict[int, Any] = {}  # tied parameters stay tied
    generator = torch.Generator(device=device).manual_seed(seed)
    for path, owner in model.named_modules():
        prefix = f"{path}." if path else ""
        for attribute, parameter in list(owner._parameters.items()):
            if parameter is None:
                continue
            if id(parameter) not in made:
                tensor = torch.empty(parameter.shape, device=device, dtype=dtype_of(prefix + attribute))
                tensor.normal_(0.0, 0.02, generator=generator)
                made[id(parameter)] = torch.nn.Parameter(tensor, requires_grad=False)
            owner._parameters[attribute] = made[id(parameter)]
        for attribute, buffer in list(owner._buffers.items()):
            if buffer is None:
                continue
            persistent = attribute not in owner._non_persistent_buffers_set
            cast = (persistent and buffer.is_floating_point()
                    and dtype_of(prefix + attribute) == torch.bfloat16)
            owner._buffers[attribute] = buffer.to(device=device,
                                                  dtype=torch.bfloat16 if cast else buffer.dtype)
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        if tensor.is_meta:
            raise RuntimeError(f"{name} was left on the meta device")
    torch.cuda.synchronize()
    return model.eval().requires_grad_(False)


def parameter_bytes(model) -> int:
    return flux.parameter_bytes(model) + sum(
        b.numel() * b.element_size() for n, b in model.named_buffers())


def forward_fn(model, inputs: Dict[str, Any], holder: Dict[str, Any]) -> Callable[[], None]:
    """One step: the forward; its output stays in ``holder["out"]`` (on the device)."""
    import torch

    def step() -> None:
        with torch.no_grad():
            output = model(**inputs)
        holder["out"] = output[0] if isinstance(output, (tuple, list)) else output.sample

    return step


def compare(output, reference) -> Dict[str, Any]:
    """Bitwise comparison of an output (any device) with the reference (CPU)."""
    if reference is None:
        return {"bitwise_equal": None, "note": "no reference (the all-GPU forward failed)"}
    output = output.detach().to("cpu")
    if output.shape != reference.shape or output.dtype != reference.dtype:
        return {"bitwise_equal": False,
                "note": f"{tuple(output.shape)} {output.dtype} vs {tuple(reference.shape)} "
                        f"{reference.dtype}"}
    import torch

    equal = torch.equal(output, reference)  # a NaN anywhere makes it False: counted below
    result: Dict[str, Any] = {"bitwise_equal": equal}
    if not equal:
        difference = (output.float() - reference.float()).abs()
        result["max_abs_diff"] = float(difference.max())
        result["mismatched_elements"] = int((output != reference).sum())
        result["nan_elements"] = [int(output.isnan().sum()), int(reference.isnan().sum())]
    return result


# ---------------------------------------------------------------------------------------------
# The phases.


class Run:
    """The figures of one architecture, written to JSON after every change."""

    def __init__(self, path: str, figures: Dict[str, Any]) -> None:
        self.path = path
        self.figures = figures

    def save(self) -> None:
        if self.path:
            Path(self.path).write_text(json.dumps(self.figures, indent=1, default=str))


def reference_phase(model, expert: str, shapes, inputs, args, run: Run) -> Dict[str, Any]:
    """C, activation peak, reference output and its repeatability, per shape (all weights on
    the GPU, no cap)."""
    import torch

    references: Dict[str, Any] = {}
    for shape in shapes:
        entry: Dict[str, Any] = {}
        run.figures["compute"].setdefault(expert, {})[shape.name] = entry
        holder: Dict[str, Any] = {}
        step = forward_fn(model, inputs[shape.name], holder)
        try:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            entry["first_step_s"] = flux.time_step(step)
            first = holder.pop("out").to("cpu")
            times = flux.time_steps(step, max(0, args.warmup - 1), args.steps)
            entry["activation_peak_bytes"] = torch.cuda.max_memory_allocated() - base
            entry["steps_s"], entry["step_s"] = times, median(times)
            entry["reference_repeatable"] = compare(holder.pop("out"), first)["bitwise_equal"]
            entry["output_shape"] = list(first.shape)
            references[shape.name] = first
            log(f"{expert} {shape.name}: C = {entry['step_s']:.3f} s/step, activations "
                f"{entry['activation_peak_bytes'] / GIB:.2f} GiB, repeatable "
                f"{entry['reference_repeatable']}")
        except Exception as error:  # noqa: BLE001 - recorded, the run goes on
            entry["error"] = flux.describe_error(error)
            references[shape.name] = None
            log(f"{expert} {shape.name}: all-GPU forward failed: {entry['error']}")
            holder.clear()
            flux.release_memory()
        run.save()
    return references


def activation_reserve(run: Run, shape, args) -> float:
    """DDO_ACTIVATION_RESERVE_GB for a shape: the largest measured peak + 1 GiB, to 0.5 GiB."""
    if args.activation_reserve_gb != "auto":
        return float(args.activation_reserve_gb)
    peaks = [entries[shape.name].get("activation_peak_bytes")
             for entries in run.figures["compute"].values() if shape.name in entries]
    peaks = [p for p in peaks if p is not None]
    if not peaks:
        return float(args.fallback_reserve_gb)
    return math.ceil((max(peaks) / GIB + 1.0) * 2) / 2


def ddo_session(client, model, key: str, inputs, reference, cap: float, settings: Dict[str, str],
                total: int, args) -> Dict[str, Any]:
    """One enable_offload session at ``cap``: learning forward, warm-up, timed steps, the last
    output compared with the reference; released at the end."""
    import torch
    from diffusers_dynamic_offloader import enable_offload

    result: Dict[str, Any] = {"cap_gib": cap, "settings": settings}
    flux.set_fraction(1.0)
    started = time.perf_counter()
    applied = enable_offload(model, route="dynamic_offload", component="transformer",
                             execution_device="cuda:0", cache_key=key, client=client,
                             environ=settings)
    result["open_s"] = time.perf_counter() - started
    try:
        hook = applied.hook
        result["route"] = applied.route
        result["plan"] = flux.plan_summary(getattr(hook, "plan", None))
        device_bytes = flux.session_device_bytes(client, hook, os.getpid())
        result["session_device_bytes"] = device_bytes
        runner_bytes = int(cap * GIB) - device_bytes
        if runner_bytes <= 0:
            raise RuntimeError(f"ddod's session uses {device_bytes / GIB:.2f} GiB, more than the "
                               f"{cap:g} GiB cap")
        result["runner_fraction"] = runner_bytes / total
        flux.set_fraction(runner_bytes / total)
        torch.cuda.reset_peak_memory_stats()
        holder: Dict[str, Any] = {}
        step = forward_fn(model, inputs, holder)
        result["first_forward_s"] = flux.time_step(step)
        result.update({f"first_{k}": v for k, v in compare(holder["out"], reference).items()})
        for _ in range(args.warmup):
            flux.time_step(step)
        before = flux.numeric(hook.stats())
        times = [flux.time_step(step) for _ in range(args.steps)]
        after = flux.numeric(hook.stats())
        result["steps_s"], result["step_s"] = times, median(times)
        result["stats"] = after
        result["stats_timed_delta"] = {k: after[k] - before.get(k, 0) for k in after}
        result["runner_peak_bytes"] = torch.cuda.max_memory_reserved()
        result.update(compare(holder.pop("out"), reference))
    finally:
        flux.set_fraction(1.0)
        started = time.perf_counter()
        applied.release()
        result["close_s"] = time.perf_counter() - started
        flux.release_memory()
    return result


def ddo_phase(client, experts, keys, hosts, shapes, inputs, references, caps, total, args,
              run: Run) -> None:
    """Every cap, every shape, every expert in turn; a failure is recorded and the run goes on."""
    figures = run.figures["ddo"]
    for cap in caps:
        for shape in shapes:
            reserve = activation_reserve(run, shape, args)
            settings = flux.ddo_settings(cap, reserve, args)
            for index, (expert, model) in enumerate(experts.items()):
                label = f"DDO {expert} {shape.name} at {cap:g} GiB"
                try:
                    result = ddo_session(client, model, keys[expert], inputs[shape.name],
                                         references[expert].get(shape.name), cap, settings,
                                         total, args)
                    log(f"{label}: {result['step_s']:.3f} s/step (open {result['open_s']:.2f} s, "
                        f"first {result['first_forward_s']:.2f} s, session "
                        f"{result['session_device_bytes'] / GIB:.2f} GiB, streamed "
                        f"{result['stats'].get('streamed_bytes_per_cycle', 0) / 1e9:.2f} GB/step, "
                        f"bitwise {result['bitwise_equal']})")
                except Exception as error:  # noqa: BLE001 - recorded, the run goes on
                    result = {"cap_gib": cap, "settings": settings,
                              "error": flux.describe_error(error)}
                    log(f"{label}: {result['error']}")
                    if not flux.is_oom(error):
                        traceback.print_exc()
                    flux.set_fraction(1.0)
                    flux.release_memory()
                flux.restore_parameters(model, hosts[expert])
                if index > 0:
                    previous = figures[str(cap)][shape.name][list(experts)[index - 1]]
                    if "close_s" in previous and "first_forward_s" in result:
                        result["switch_s"] = (previous["close_s"] + result["open_s"]
                                              + result["first_forward_s"])
                figures.setdefault(str(cap), {}).setdefault(shape.name, {})[expert] = result
                run.save()


def anchor_phase(model, host, expert: str, kind: str, shapes, inputs, references, caps, total,
                 args, run: Run) -> None:
    """diffusers apply_group_offloading ``kind`` on one expert, set up once, each shape timed
    under the smallest cap where it runs (or under every cap)."""
    import torch
    from diffusers.hooks import apply_group_offloading

    result: Dict[str, Any] = {"shapes": {}}
    run.figures["diffusers"].setdefault(expert, {})[kind] = result
    flux.restore_parameters(model, host)
    flux.release_memory()
    flux.set_fraction(1.0)
    options = flux.group_offload_options(kind)
    result["options"] = {k: str(v) for k, v in options.items()}
    started = time.perf_counter()
    apply_group_offloading(model, **options)
    result["setup_s"] = time.perf_counter() - started
    log(f"diffusers {kind} on {expert}: setup {result['setup_s']:.1f} s")
    try:
        for shape in shapes:
            holder: Dict[str, Any] = {}
            step = forward_fn(model, inputs[shape.name], holder)
            per_cap: Dict[str, Any] = {}
            result["shapes"][shape.name] = per_cap
            for cap in sorted(caps):
                entry: Dict[str, Any] = {"cap_gib": cap, "fraction": cap * GIB / total}
                per_cap[str(cap)] = entry
                try:
                    flux.set_fraction(cap * GIB / total)
                    torch.cuda.reset_peak_memory_stats()
                    entry["first_step_s"] = flux.time_step(step)
                    times = flux.time_steps(step, args.warmup, args.steps)
                    entry["steps_s"], entry["step_s"] = times, median(times)
                    entry["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
                    entry.update(compare(holder.pop("out"),
                                         references[expert].get(shape.name)))
                    log(f"diffusers {kind} {expert} {shape.name} at {cap:g} GiB: "
                        f"{entry['step_s']:.3f} s/step, bitwise {entry['bitwise_equal']}")
                except Exception as error:  # noqa: BLE001 - recorded, the run goes on
                    entry["error"] = flux.describe_error(error)
                    log(f"diffusers {kind} {expert} {shape.name} at {cap:g} GiB: {entry['error']}")
                    if not flux.is_oom(error):
                        traceback.print_exc()
                    holder.clear()
                    flux.set_fraction(1.0)
                    flux.release_memory()
                run.save()
                if args.anchor_caps == "smallest" and "step_s" in entry:
                    entry["stands_for_caps_up_to"] = max(caps)
                    break
    finally:
        flux.set_fraction(1.0)
        try:
            flux.remove_group_offloading(model)
        except Exception as error:  # noqa: BLE001
            result["remove_error"] = flux.describe_error(error)
        flux.restore_parameters(model, host)
        flux.release_memory()
        run.save()


# ---------------------------------------------------------------------------------------------
# The table.


def anchor_step(anchor: Dict[str, Any], shape: str, cap: float) -> Dict[str, Any]:
    """The anchor's figure at ``cap``: measured there, or the one measured at a smaller cap
    that stands for larger ones (--anchor-caps smallest; "from_cap_gib" says where)."""
    per_cap = anchor.get("shapes", {}).get(shape, {})
    if str(cap) in per_cap and ("step_s" in per_cap[str(cap)] or "error" in per_cap[str(cap)]):
        return per_cap[str(cap)]
    for entry in per_cap.values():
        if "step_s" in entry and entry["cap_gib"] <= cap <= entry.get("stands_for_caps_up_to", -1):
            return {**entry, "from_cap_gib": entry["cap_gib"]}
    return {}


def summarize(figures: Dict[str, Any], caps: List[float], shapes: List[str]) -> List[Dict[str, Any]]:
    """One row per (shape, cap, expert): DDO, the bound and the anchors (pure: no torch)."""
    b = figures.get("h2d", {}).get("gbps_median")
    rows = []
    for shape in shapes:
        for cap in caps:
            for expert in figures["model"]["experts"]:
                c = figures.get("compute", {}).get(expert, {}).get(shape, {}).get("step_s")
                d = figures.get("ddo", {}).get(str(cap), {}).get(shape, {}).get(expert, {})
                step = d.get("step_s")
                s_bytes = d.get("stats", {}).get("streamed_bytes_per_cycle")
                s_over_b = s_bytes / (b * 1e9) if (s_bytes is not None and b) else None
                bound = (max(c, s_over_b) if c is not None and s_over_b is not None
                         else s_over_b if s_over_b is not None else None)
                anchors = figures.get("diffusers", {}).get(expert, {})
                block = anchor_step(anchors.get("block_level", {}), shape, cap)
                leaf = anchor_step(anchors.get("leaf_level", {}), shape, cap)
                best = min([a["step_s"] for a in (block, leaf) if "step_s" in a], default=None)
                rows.append({
                    "shape": shape, "cap_gib": cap, "expert": expert, "compute_s": c,
                    "ddo_step_s": step, "ddo_bitwise_equal": d.get("bitwise_equal"),
                    "ddo_error": d.get("error"), "switch_s": d.get("switch_s"),
                    "streamed_bytes_per_step": s_bytes, "s_over_b_s": s_over_b, "bound_s": bound,
                    "ddo_over_bound": step / bound if (step and bound) else None,
                    "block_level_step_s": block.get("step_s"),
                    "block_level_from_cap_gib": block.get("from_cap_gib"),
                    "block_level_bitwise_equal": block.get("bitwise_equal"),
                    "block_level_error": block.get("error"),
                    "leaf_level_step_s": leaf.get("step_s"),
                    "leaf_level_from_cap_gib": leaf.get("from_cap_gib"),
                    "leaf_level_bitwise_equal": leaf.get("bitwise_equal"),
                    "leaf_level_error": leaf.get("error"),
                    "best_diffusers_over_ddo": best / step if (best and step) else None})
    return rows


def report(figures: Dict[str, Any], caps: List[float], shapes: List[str]) -> None:
    rows = summarize(figures, caps, shapes)
    figures["summary"] = rows
    model = figures["model"]
    print()
    print(f"{model['label']} ({model['class']}, {model.get('bytes', 0) / GIB:.2f} GiB per expert, "
          f"{len(model['experts'])} expert(s)); 1 forward per step, median of "
          f"{figures['args']['steps']} after {figures['args']['warmup']} warm-up; "
          f"B = {fmt(figures.get('h2d', {}).get('gbps_median'), '.1f')} GB/s pinned H2D")
    for name in shapes:
        shape = figures["shapes"][name]
        print(f"  {name}: {shape['note']}: {shape['tokens']} tokens + {shape['text_tokens']} text")
    print()
    header = (f"{'shape':>11} {'cap':>4} {'expert':>13} {'C s':>7} {'DDO s':>7} {'bit':>4} "
              f"{'S GB':>6} {'bound':>7} {'DDO/bd':>6} {'block s':>9} {'leaf s':>9} "
              f"{'best/DDO':>8}")
    print(header)

    def bit(value: Optional[bool]) -> str:
        return "-" if value is None else ("yes" if value else "NO")

    def anchor(row: Dict[str, Any], kind: str) -> str:
        if row[f"{kind}_step_s"] is None:
            return "OOM" if "OOM" in (row[f"{kind}_error"] or "") else "-"
        mark = "*" if row[f"{kind}_from_cap_gib"] is not None else ""
        return f"{row[f'{kind}_step_s']:.3f}{mark}"

    for row in rows:
        s_gb = row["streamed_bytes_per_step"] / 1e9 if row["streamed_bytes_per_step"] is not None else None
        print(f"{row['shape']:>11} {row['cap_gib']:>4g} {row['expert']:>13} {fmt(row['compute_s']):>7} "
              f"{fmt(row['ddo_step_s']):>7} {bit(row['ddo_bitwise_equal']):>4} "
              f"{fmt(s_gb, '.2f'):>6} {fmt(row['bound_s']):>7} "
              f"{fmt(row['ddo_over_bound'], '.2f'):>6} {anchor(row, 'block_level'):>9} "
              f"{anchor(row, 'leaf_level'):>9} {fmt(row['best_diffusers_over_ddo'], '.2f'):>8}")
        for kind in ("ddo", "block_level", "leaf_level"):
            if row[f"{kind}_error"]:
                print(f"{'':>17}{kind}: {row[f'{kind}_error'][:150]}")
        if row["switch_s"] is not None:
            print(f"{'':>17}expert switch (release, enable_offload, first forward): "
                  f"{row['switch_s']:.2f} s")
    print("  bit: the last timed output bitwise equal to the all-GPU output; bound = max(C, S/B); "
          "best/DDO = fastest anchor / DDO")
    print("  * measured under a smaller cap: group offloading's device memory does not depend "
          "on the cap (--anchor-caps all to time every cap)")
    for expert, kinds in figures.get("diffusers", {}).items():
        for kind, anchor_figures in kinds.items():
            print(f"  diffusers {kind} on {expert}: setup {fmt(anchor_figures.get('setup_s'), '.1f')} s")


# ---------------------------------------------------------------------------------------------


def json_path(given: str, name: str, architectures: int, out_dir: str, smoke: bool) -> str:
    """Where an architecture's JSON goes: --json-out (with the name added when one run measures
    several), else $OUT/arch-<name>[-smoke].json, else nowhere."""
    if given:
        if architectures == 1:
            return given
        base, extension = os.path.splitext(given)
        return f"{base}-{name}{extension or '.json'}"
    if out_dir:
        return os.path.join(out_dir, f"arch-{name}{'-smoke' if smoke else ''}.json")
    return ""


def run_architecture(architecture: archs.Architecture, args, caps: List[float], total: int,
                     machine: Dict[str, Any]) -> Dict[str, Any]:
    import torch

    config = ({**architecture.config, **architecture.smoke_config} if args.smoke
              else dict(architecture.config))
    if args.smoke:
        shapes = [architecture.smoke_shape]
    elif args.shapes:
        shapes = [architecture.shapes[name] for name in args.shapes.split(",")]
    else:
        shapes = [architecture.shapes[name] for name in architecture.default_shapes]
    experts = architecture.experts
    anchor_experts = experts if args.anchor_experts == "all" else experts[:1]
    json_out = json_path(args.json_out, architecture.name, len(args.arch_list),
                         os.environ.get("OUT", ""), args.smoke)
    run = Run(json_out, {
        "args": {k: v for k, v in vars(args).items() if k != "arch_list"},
        "machine": machine,
        "model": {"name": architecture.name, "label": architecture.label + (" (smoke)" if args.smoke else ""),
                  "class": architecture.class_name, "config": config, "experts": list(experts)},
        "shapes": {s.name: {"height": s.height, "width": s.width, "frames": s.frames,
                            "text_tokens": s.text_tokens, "tokens": architecture.tokens(s),
                            "latent": list(architecture.latent(s)), "note": s.note}
                   for s in shapes},
        "caps_gib": caps, "compute": {}, "ddo": {}, "diffusers": {},
    })
    figures = run.figures
    log(f"=== {figures['model']['label']}: shapes "
        f"{', '.join(f'{s.name} ({architecture.tokens(s)} tokens)' for s in shapes)}; caps {caps}")

    # 1. Each expert on the GPU: C and the reference; then to the CPU.
    models: Dict[str, Any] = {}
    references: Dict[str, Dict[str, Any]] = {}
    inputs: Dict[str, Dict[str, Any]] = {}
    for seed, expert in enumerate(experts):
        started = time.perf_counter()
        model = build_random(architecture, config, "cuda", seed)
        figures["model"].setdefault("build_s", {})[expert] = time.perf_counter() - started
        figures["model"]["bytes"] = parameter_bytes(model)
        figures["model"]["parameters"] = sum(p.numel() for p in model.parameters())
        log(f"{expert}: {figures['model']['parameters'] / 1e9:.2f} B parameters, "
            f"{figures['model']['bytes'] / GIB:.2f} GiB, built in "
            f"{figures['model']['build_s'][expert]:.1f} s")
        if not inputs:
            inputs = {s.name: architecture.inputs(model, s, "cuda") for s in shapes}
        references[expert] = reference_phase(model, expert, shapes, inputs, args, run)
        started = time.perf_counter()
        torch.nn.Module.to(model, "cpu")
        flux.release_memory()
        figures["model"].setdefault("to_cpu_s", {})[expert] = time.perf_counter() - started
        models[expert] = model
    figures["h2d"] = flux.pinned_h2d_gbps(int(args.h2d_gib * GIB), 7)
    log(f"B = {figures['h2d']['gbps_median']:.1f} GB/s pinned H2D")
    run.save()

    # 2. Into ddod's pool; the modules then read the pool's views (one host copy).
    from diffusers_dynamic_offloader import DdoClient
    from diffusers_dynamic_offloader._proto import info_pb2

    work = Path(tempfile.mkdtemp(prefix=f"ddo-arch-{architecture.name}-", dir="/tmp"))
    ddod = flux.Ddod(args.ddod, work, args.ddod_arg)
    attached: List[Any] = []
    client = None
    try:
        client = DdoClient.connect(ddod.address, timeout=600)
        info = client.info()
        if info.backend != info_pb2.BACKEND_CUDA:
            fail(f"ddod runs the {info_pb2.Backend.Name(info.backend)} backend "
                 f"({info.backend_detail}); the benchmark needs CUDA")
        figures["ddod"] = {"backend": info.backend_detail, "work_dir": str(work)}
        keys = {expert: f"bench/{architecture.name}-{expert}-random:bf16" for expert in experts}
        hosts: Dict[str, Dict[str, Any]] = {}
        for expert, model in models.items():
            started = time.perf_counter()
            component = client.register_module(keys[expert], model, progress=False)
            registered = time.perf_counter()
            view = client.attach(keys[expert])
            view.bind(model)
            attached.append(view)
            object.__setattr__(model, "_ddo_attached_component", view)  # as load_from_ddod
            hosts[expert] = flux.host_tensors(model)
            flux.release_memory()
            figures["ddod"].setdefault("register", {})[expert] = {
                "register_s": registered - started, "bind_s": time.perf_counter() - registered,
                "component_bytes": component.total_bytes}
            log(f"{expert}: registered in {registered - started:.1f} s, bound to the pool's views")
        run.save()

        # 3. DDO through the seed API.
        ddo_phase(client, models, keys, hosts, shapes, inputs, references, caps, total, args, run)

        # 4. diffusers group offloading (the modules still read the pool's views).
        if not args.skip_diffusers:
            for expert in anchor_experts:
                for kind in ANCHOR_KINDS:
                    try:
                        anchor_phase(models[expert], hosts[expert], expert, kind, shapes, inputs,
                                     references, caps, total, args, run)
                    except Exception as error:  # noqa: BLE001
                        figures["diffusers"].setdefault(expert, {}).setdefault(kind, {})[
                            "error"] = flux.describe_error(error)
                        log(f"diffusers {kind} on {expert} failed: {error}")
                        traceback.print_exc()
                        flux.restore_parameters(models[expert], hosts[expert])
                        flux.release_memory()
    finally:
        models.clear()
        for view in attached:
            view.close()
        if client is not None:
            client.close()
        code = ddod.stop()
        figures["ddod"] = {**figures.get("ddod", {}), "exit": code,
                           "log_tail": ddod.log_tail(2000)}
        flux.release_memory()
        report(figures, caps, [s.name for s in shapes])
        run.save()
        if run.path:
            log(f"wrote {run.path}")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=f"Architectures: {', '.join(archs.ARCHITECTURES)}. Memory: host RAM holds one "
               f"copy of the weights (ddod's pool, also the modules' views) plus, during each "
               f"anchor, its pinned copy; GPU: the all-GPU reference needs the whole model.")
    parser.add_argument("--arch", required=True,
                        help="one architecture (or a comma list, or all: meant for --smoke)")
    parser.add_argument("--ddod", required=True, help="the ddod binary (e.g. .bundle/bin/ddod)")
    parser.add_argument("--caps", default=None, help="VRAM caps in GiB (8,12,16,24; smoke 2,3)")
    parser.add_argument("--shapes", default="",
                        help="shape names (comma list; default: the architecture's defaults)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per figure (3)")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up steps before timing (1)")
    parser.add_argument("--smoke", action="store_true",
                        help="one or two blocks and a small shape: the code paths, no figures")
    parser.add_argument("--anchor-caps", choices=("smallest", "all"), default="smallest",
                        help="time the diffusers anchors under the smallest cap where they run "
                             "(standing for larger caps) or under every cap (smallest)")
    parser.add_argument("--anchor-experts", choices=("first", "all"), default="first",
                        help="Wan 2.2: the anchors on the first expert only, or on both (first)")
    parser.add_argument("--skip-diffusers", action="store_true", help="no diffusers anchors")
    parser.add_argument("--stream-unit", choices=("linear", "block"), default="linear",
                        help="DDO_STREAM_UNIT (linear)")
    parser.add_argument("--activation-reserve-gb", default="auto",
                        help="DDO_ACTIVATION_RESERVE_GB; auto = the shape's all-GPU activation "
                             "peak + 1 GiB, rounded up to 0.5 GiB")
    parser.add_argument("--fallback-reserve-gb", type=float, default=4.0,
                        help="the reserve where no all-GPU forward measured the peak (4)")
    parser.add_argument("--setting", action="append", default=[], metavar="NAME=VALUE",
                        help="another DDO_* setting (repeatable)")
    parser.add_argument("--h2d-gib", type=float, default=1.0, help="pinned copy size (1 GiB)")
    parser.add_argument("--ddod-arg", action="append", default=[], metavar="ARG",
                        help="an extra ddod argument (repeatable)")
    parser.add_argument("--json-out", default="",
                        help="JSON path (default $OUT/arch-<name>.json when $OUT is set)")
    args = parser.parse_args()

    names = list(archs.ARCHITECTURES) if args.arch == "all" else args.arch.split(",")
    try:
        args.arch_list = [archs.get(name.strip()) for name in names if name.strip()]
    except ValueError as error:
        fail(str(error))
    if len(args.arch_list) > 1 and not args.smoke:
        fail("one architecture per invocation (each takes minutes); several only with --smoke")
    caps_text = args.caps or ("2,3" if args.smoke else "8,12,16,24")
    caps = sorted(float(c) for c in caps_text.split(",") if c.strip())
    if not caps or any(c <= 0 for c in caps):
        fail(f"--caps {caps_text!r}: give positive GiB values")
    if args.steps < 1 or args.warmup < 0:
        fail("--steps must be >= 1 and --warmup >= 0")
    if not (os.path.isfile(args.ddod) and os.access(args.ddod, os.X_OK)):
        fail(f"--ddod {args.ddod!r} is not an executable file")
    for architecture in args.arch_list:
        for name in (args.shapes.split(",") if args.shapes and not args.smoke else []):
            if name not in architecture.shapes:
                fail(f"{architecture.name} has no shape {name!r}; it has "
                     f"{', '.join(architecture.shapes)}")

    import torch

    if not torch.cuda.is_available():
        fail("no CUDA device: this benchmark runs on the GPU machine")
    try:
        import diffusers
    except ImportError as error:
        fail(f"cannot import diffusers ({error}): export its src/ into .device-deps/src "
             f"(/work/shared/DEVICE.md) and put it on PYTHONPATH")
    if importlib.util.find_spec("accelerate") is None:
        fail("cannot import accelerate (build_random uses its init_empty_weights, as diffusers' "
             "from_pretrained does)")
    torch.cuda.set_device(0)
    props = torch.cuda.get_device_properties(0)
    machine = {"gpu": props.name, "gpu_total_bytes": props.total_memory, "cpus": os.cpu_count(),
               "torch": torch.__version__, "python": platform.python_version(),
               "diffusers": diffusers.__version__, "host": platform.node()}
    log(f"{props.name}, {props.total_memory / GIB:.1f} GiB; torch {torch.__version__}; "
        f"diffusers {diffusers.__version__}")
    failed = []
    for architecture in args.arch_list:
        try:
            run_architecture(architecture, args, caps, props.total_memory, machine)
        except Exception as error:  # noqa: BLE001 - with several (--smoke), the next one runs
            if len(args.arch_list) == 1:
                raise
            failed.append(architecture.name)
            log(f"{architecture.name} failed: {flux.describe_error(error)}")
            traceback.print_exc()
            flux.release_memory()
    if failed:
        log(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
