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
  and, from another run, stored), against diffusers'.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flux", type=Path, required=True,
                        help="bench_flux_stream.py's --json-out of a run with DDO and diffusers")
    parser.add_argument("--lora", type=Path, required=True,
                        help="bench_lora_swap.py's --json-out of a run with --parts group,ddo")
    parser.add_argument("--lora-stored", type=Path, required=True,
                        help="a bench_lora_swap.py run with --fused-lora stored (its DDO part)")
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    flux, lora = load(args.flux), load(args.lora)
    stored = load(args.lora_stored)
    for path in (step_vs_cap(flux, args.out), start_bars(flux, args.out),
                 lora_bars(lora, stored, args.out)):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
