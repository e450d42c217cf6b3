#!/usr/bin/env python3
"""Plots of the recorded benchmark results for docs/benchmarks.md (PNG, Debian's matplotlib).

    apt-get install python3-matplotlib
    /usr/bin/python3 bench/plot_results.py \\
        --flux bench/results/2026-12-03/run11-flux-arena.json \\
        --lora bench/results/2026-12-04/run29-lora-swap.json \\
        --lora-stored bench/results/2026-12-04/run27-lora-swap.json --out docs/images

Writes, from the JSON the benchmarks recorded (nothing is measured here):

- ``flux-step-vs-cap.png``: step time of the FLUX.1-dev-size transformer against the VRAM cap,
  for DDO and diffusers' group offloading (block and leaf level), with the bound
  max(all-GPU compute, streamed bytes / pinned H2D bandwidth) of the same run
  (bench_flux_stream.py's ``summary``);
- ``flux-start.png``: seconds from a runner's imports to its first step: DDO cold (upload into
  ddod's pool, open the session, the learning forward), DDO warm (a second runner attaching
  what ddod holds), diffusers' group offloading (setup pins a copy, then the first step);
- ``lora-switch.png``: LoRA switches on the same transformer (bench_lora_swap.py): unfused,
  fused to a LoRA never fused before, fused back to one fused before (DDO_FUSED_LORA=on_arrival,
  and, from another run, stored), against diffusers';
- ``arch-<name>-step-vs-cap.png`` (``--arch``, repeatable): one per architecture measured by
  bench_architectures.py, a panel per shape: step time against the VRAM cap for DDO (each
  expert), diffusers' group offloading (block and leaf level; hollow markers where a figure
  measured under a smaller cap stands for a larger one) and the bound max(C, S/B), with the
  all-GPU step C.

- ``consumer-run.png`` (``--consumer``; ``consumer-run-PIPELINE-STORAGE.png`` for a run other
  than FLUX in bf16): bench_consumer.py's run, seconds per image and peak
  host memory of each mode against the RAM budget + 1 GiB.

Each of --flux, --lora (with --lora-stored), --arch and --consumer draws its own plots; give
any of them.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any, Dict, List, Tuple

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt  # noqa: E402

DDO_COLOR, BLOCK_COLOR, LEAF_COLOR, BOUND_COLOR = "#1f77b4", "#ff7f0e", "#d62728", "#555555"


def load(path: Path) -> Dict[str, Any]:
    with path.open() as handle:
        return json.load(handle)


def bar_chart(bars: List[Tuple[str, float, str]], path: Path, value_format: str, *,
              ylabel: str, title: str, log: bool = False) -> Path:
    """One bar per (label, seconds, color), each labelled with its value, saved as ``path``."""
    figure, axes = plt.subplots(figsize=(6.4, 3.8))
    positions = range(len(bars))
    drawn = axes.bar(positions, [seconds for _, seconds, _ in bars],
                     color=[color for _, _, color in bars])
    axes.bar_label(drawn, fmt=value_format, fontsize=8)
    axes.set_xticks(list(positions), [label for label, _, _ in bars], fontsize=8)
    if log:
        axes.set_yscale("log")
    axes.set_ylabel(ylabel)
    axes.set_title(title, fontsize=10)
    axes.grid(axis="y", alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def step_vs_cap(flux: Dict[str, Any], out: Path) -> Path:
    rows = sorted(flux["summary"], key=lambda row: row["cap_gib"])
    caps = [row["cap_gib"] for row in rows]
    figure, axes = plt.subplots(figsize=(6.4, 4.0))
    axes.plot(caps, [row["ddo_step_s"] for row in rows], "o-", color=DDO_COLOR, label="DDO")
    axes.plot(caps, [row["block_level_step_s"] for row in rows], "s-", color=BLOCK_COLOR,
              label="diffusers group offload, block_level")
    axes.plot(caps, [row["leaf_level_step_s"] for row in rows], "^-", color=LEAF_COLOR,
              label="diffusers group offload, leaf_level")
    axes.plot(caps, [row["bound_s"] for row in rows], "--", color=BOUND_COLOR,
              label="bound: max(all-GPU step, streamed bytes / H2D)")
    axes.set_xlabel("VRAM cap (GiB)")
    axes.set_ylabel("seconds per step (lower is better)")
    axes.set_xticks(caps)
    axes.set_ylim(bottom=0)
    machine = flux.get("machine", {})
    axes.set_title(f"{flux['model']['label']} transformer, {machine.get('gpu', '')}, "
                   f"H2D {flux['h2d']['gbps_median']:.1f} GB/s", fontsize=10)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="center right")
    path = out / "flux-step-vs-cap.png"
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def start_bars(flux: Dict[str, Any], out: Path) -> Path:
    cold = flux["cold"]
    warm_runs = flux["warm"]["runs"]
    bars = [
        ("DDO, cold\n(upload, open, 1st step)", cold["ddo"]["seconds"], DDO_COLOR),
        ("DDO, warm\n(second runner)",
         statistics.median(run["after_imports_to_first_step_s"] for run in warm_runs), DDO_COLOR),
        ("group offload\nblock_level", cold["diffusers block_level"]["seconds"], BLOCK_COLOR),
        ("group offload\nleaf_level", cold["diffusers leaf_level"]["seconds"], LEAF_COLOR),
    ]
    return bar_chart(bars, out / "flux-start.png", "%.1f s",
                     ylabel="seconds to the first step, after imports",
                     title=f"{flux['model']['label']} transformer at "
                           f"{flux['warm']['cap_gib']:g} GiB")


def lora_bars(lora: Dict[str, Any], stored: Dict[str, Any], out: Path) -> Path:
    ddo, group = lora["ddo"], lora["group"]
    unfused = max(entry["median_s"] for entry in ddo["unfused_switch"].values())
    group_unfused = max(entry["median_s"] for entry in group["unfused_switch"].values())

    def back(run: Dict[str, Any]) -> float:
        return statistics.median(entry["switch_s"] for entry in run["ddo"]["fused"]["switches_back"])

    bars = [
        ("DDO\nunfused", unfused, DDO_COLOR),
        ("group\nunfused", group_unfused, BLOCK_COLOR),
        ("DDO fused\non arrival,\nfirst time", ddo["fused"]["switch_s"], DDO_COLOR),
        ("DDO fused\non arrival,\nback", back(lora), DDO_COLOR),
        ("DDO fused\nstored,\nfirst time", stored["ddo"]["fused"]["switch_s"], DDO_COLOR),
        ("DDO fused\nstored,\nback", back(stored), DDO_COLOR),
        ("group\nfused", group["fused"]["switch_s"], BLOCK_COLOR),
    ]
    return bar_chart(bars, out / "lora-switch.png", "%.2f s", log=True,
                     ylabel="seconds per switch (log scale)",
                     title=f"LoRA switch, rank {lora['args']['rank']} on every Linear, "
                           f"{lora['args']['cap']:g} GiB cap")


def arch_step_vs_cap(run: Dict[str, Any], out: Path) -> Path:
    """bench_architectures.py's ``summary``: a panel per shape, step time against the cap."""
    rows = run["summary"]
    shapes = list(dict.fromkeys(row["shape"] for row in rows))
    experts = run["model"]["experts"]
    figure, panels = plt.subplots(1, len(shapes), figsize=(5.2 * len(shapes), 4.0), squeeze=False)
    for axes, shape in zip(panels[0], shapes):
        mine = sorted((row for row in rows if row["shape"] == shape), key=lambda r: r["cap_gib"])
        caps = sorted({row["cap_gib"] for row in mine})
        for index, expert in enumerate(experts):
            points = [(r["cap_gib"], r["ddo_step_s"]) for r in mine
                      if r["expert"] == expert and r["ddo_step_s"] is not None]
            label = "DDO" if len(experts) == 1 else f"DDO, {expert}"
            axes.plot([c for c, _ in points], [s for _, s in points], "o-" if index == 0 else "o:",
                      color=DDO_COLOR, label=label)
        first = [r for r in mine if r["expert"] == experts[0]]
        for kind, marker, color in (("block_level", "s", BLOCK_COLOR), ("leaf_level", "^", LEAF_COLOR)):
            measured = [(r["cap_gib"], r[f"{kind}_step_s"]) for r in first
                        if r[f"{kind}_step_s"] is not None]
            axes.plot([c for c, _ in measured], [s for _, s in measured], "-", color=color,
                      label=f"diffusers group offload, {kind}")
            for row in first:
                if row[f"{kind}_step_s"] is not None:
                    stands_in = row[f"{kind}_from_cap_gib"] is not None
                    axes.plot(row["cap_gib"], row[f"{kind}_step_s"], marker, color=color,
                              markerfacecolor="none" if stands_in else color)
        bound = [(r["cap_gib"], r["bound_s"]) for r in first if r["bound_s"] is not None]
        axes.plot([c for c, _ in bound], [s for _, s in bound], "--", color=BOUND_COLOR,
                  label="bound: max(all-GPU step, streamed bytes / H2D)")
        compute = next((r["compute_s"] for r in first if r["compute_s"] is not None), None)
        if compute is not None:
            axes.axhline(compute, color=BOUND_COLOR, linewidth=0.8, alpha=0.5)
        details = run["shapes"][shape]
        axes.set_title(f"{details['note']}: {details['tokens']} + {details['text_tokens']} tokens",
                       fontsize=9)
        axes.set_xlabel("VRAM cap (GiB)")
        axes.set_xticks(caps)
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
    panels[0][0].set_ylabel("seconds per step (lower is better)")
    panels[0][0].legend(fontsize=7, loc="best")
    machine = run.get("machine", {})
    figure.suptitle(f"{run['model']['label']} transformer ({run['model']['bytes'] / 2**30:.1f} GiB "
                    f"bf16), {machine.get('gpu', '')}, H2D {run['h2d']['gbps_median']:.1f} GB/s",
                    fontsize=10)
    path = out / f"arch-{run['model']['name']}-step-vs-cap.png"
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


CONSUMER_LABELS = {"ddo": "DDO", "group_disk": "group offload\n(disk)",
                   "model_cpu": "model CPU\noffload", "sequential": "sequential\nCPU offload"}


def consumer_bars(run: Dict[str, Any], out: Path) -> Path:
    """bench_consumer.py's run: seconds per warm image and peak host memory of each mode,
    against the RAM budget + 1 GiB (the issue's bound); a mode that did not complete is
    named, with no bar."""
    modes = list(run["modes"].items())
    limit = run["ram_budget_gib"] + 1
    figure, (seconds_axes, memory_axes) = plt.subplots(1, 2, figsize=(9.6, 3.8))
    labels = [CONSUMER_LABELS.get(mode, mode) for mode, _ in modes]
    done = [result.get("completed", False) for _, result in modes]
    colors = [DDO_COLOR if mode == "ddo" else BLOCK_COLOR for mode, _ in modes]
    images = [result["images_s"][-1] if ok else 0.0 for (_, result), ok in zip(modes, done)]
    peaks = [result["host_peak_bytes"] / (1 << 30) if ok else 0.0
             for (_, result), ok in zip(modes, done)]
    for axes, values, unit in ((seconds_axes, images, "s"), (memory_axes, peaks, "GiB")):
        drawn = axes.bar(range(len(modes)), values, color=colors)
        axes.bar_label(drawn, labels=[f"{v:.1f}" if ok else "did not\ncomplete"
                                      for v, ok in zip(values, done)], fontsize=8)
        axes.set_xticks(list(range(len(modes))), labels, fontsize=8)
        axes.grid(axis="y", alpha=0.3)
    seconds_axes.set_ylabel("seconds per image (the second)")
    memory_axes.set_ylabel("peak host memory, GiB")
    memory_axes.axhline(limit, color=BOUND_COLOR, linestyle="--",
                        label=f"RAM budget + 1 GiB ({limit:g})")
    memory_axes.legend(fontsize=8, loc="upper left")
    name = {"flux": "FLUX.1-dev pipeline, 1024x1024", "wan": "Wan 2.1 14B pipeline, 480x832"}
    pipeline, storage = run.get("pipeline", "flux"), run.get("storage", "bf16")
    figure.suptitle(f"{name[pipeline]} in {storage}, {run['steps']} steps, VRAM cap "
                    f"{run['cap_gib']:g} GiB, RAM budget {run['ram_budget_gib']:g} GiB "
                    f"({run['device']})", fontsize=10)
    figure.tight_layout()
    # The first run plotted (FLUX in bf16) keeps its name; the others are named by theirs.
    suffix = "" if (pipeline, storage) == ("flux", "bf16") else f"-{pipeline}-{storage}"
    path = out / f"consumer-run{suffix}.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flux", type=Path,
                        help="bench_flux_stream.py's --json-out of a run with DDO and diffusers")
    parser.add_argument("--lora", type=Path,
                        help="bench_lora_swap.py's --json-out of a run with --parts group,ddo")
    parser.add_argument("--lora-stored", type=Path,
                        help="a bench_lora_swap.py run with --fused-lora stored (its DDO part)")
    parser.add_argument("--arch", type=Path, action="append", default=[],
                        help="bench_architectures.py's JSON of one architecture (repeatable)")
    parser.add_argument("--consumer", type=Path, help="bench_consumer.py's --json-out")
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    args = parser.parse_args()
    if (args.lora is None) != (args.lora_stored is None):
        parser.error("--lora and --lora-stored go together")
    if not (args.flux or args.lora or args.arch or args.consumer):
        parser.error("give --flux, --lora with --lora-stored, --arch or --consumer")
    args.out.mkdir(parents=True, exist_ok=True)
    paths = []
    if args.flux:
        flux = load(args.flux)
        paths += [step_vs_cap(flux, args.out), start_bars(flux, args.out)]
    if args.lora:
        paths.append(lora_bars(load(args.lora), load(args.lora_stored), args.out))
    paths += [arch_step_vs_cap(load(path), args.out) for path in args.arch]
    if args.consumer:
        paths.append(consumer_bars(load(args.consumer), args.out))
    for path in paths:
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
