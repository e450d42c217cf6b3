#!/usr/bin/env python3
"""Two GPUs from one host copy (issue 7): one ddod, one pinned host copy of a FLUX.1-dev-size
transformer, a runner process per GPU streaming it, alone and both at once.

    NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 \\
    LD_LIBRARY_PATH=$PWD/.bundle/lib PYTHONPATH=$PWD/.device-deps/src:$PWD/client-python/src \\
      python3 bench/bench_two_gpus.py --ddod .bundle/bin/ddod [--devices cuda:0,cuda:1] \\
      [--cap 16] [--steps 5] --json-out two-gpus.json

What it reports: each runner's step time and achieved H2D rate (streamed bytes per step / step
time) alone and together; whether every runner's output is bitwise equal to the first device's
run alone (same weights, same inputs); and the host memory of the component: ddod's pool (used
and pinned bytes) against the component's size, and the machine's shared memory (Shmem in
/proc/meminfo) while both runners stream. Runners name their GPU to ddod by UUID.

``--devices cuda:0,cuda:0`` runs both runners on one GPU (a check of the script on a
one-GPU machine; its figures are not the issue's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import bench_flux_stream as flux  # noqa: E402  (the model, inputs and ddod helpers)

GIB = 1 << 30
# NVLink multicast stays off in every process (the device machine's rule).
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}

RUNNER = r"""
import json, os, sys, time
cfg = json.loads(sys.argv[1])
import torch
from diffusers import FluxTransformer2DModel
from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader._proto import sessions_pb2

def say(kind, **fields):
    print(kind + " " + json.dumps(fields), flush=True)

device = torch.device(cfg["device"])
torch.cuda.set_device(device)
with torch.device("meta"):
    model = FluxTransformer2DModel(**cfg["config"])
torch.nn.Module.to(model, dtype=torch.bfloat16)
model.eval().requires_grad_(False)
client = DdoClient.connect(cfg["address"], timeout=600)
session = client.stream(model, cfg["key"], device=device, settings=cfg["settings"])
listed = client._unary("ListSessions", sessions_pb2.ListSessionsRequest()).sessions
mine = [s for s in listed if s.client_pid == os.getpid()]
device_bytes = max(s.device_bytes for s in mine) if mine else 0
total = torch.cuda.get_device_properties(device).total_memory
torch.cuda.set_per_process_memory_fraction(
    min(1.0, max(0.0, (int(cfg["cap_gib"] * 2**30) - device_bytes) / total)), device)
side, text = cfg["resolution"] // 16, cfg["text_tokens"]
generator = torch.Generator(device=device).manual_seed(0)
bf16 = torch.bfloat16
img_ids = torch.zeros(side, side, 3, device=device)
img_ids[..., 1] = torch.arange(side, device=device)[:, None]
img_ids[..., 2] = torch.arange(side, device=device)[None, :]
inputs = dict(
    hidden_states=torch.randn(1, side * side, 64, generator=generator, device=device, dtype=bf16),
    encoder_hidden_states=torch.randn(1, text, 4096, generator=generator, device=device, dtype=bf16),
    pooled_projections=torch.randn(1, 768, generator=generator, device=device, dtype=bf16),
    timestep=torch.tensor([0.5], device=device, dtype=bf16),
    img_ids=img_ids.reshape(side * side, 3), txt_ids=torch.zeros(text, 3, device=device),
    guidance=torch.tensor([3.5], device=device), return_dict=False)

def step():
    with torch.no_grad():
        out = model(**inputs)[0]
    torch.cuda.synchronize(device)
    return out

for _ in range(1 + cfg["warmup"]):  # the learning forward, then warm-up
    step()
say("READY", device_uuid=session.resources.device_uuid, session_device_bytes=device_bytes)
sys.stdin.readline()  # go
before = session.stats()
times = []
for _ in range(cfg["steps"]):
    started = time.perf_counter()
    out = step()
    times.append(time.perf_counter() - started)
after = session.stats()
torch.save(out.cpu(), cfg["output"])
# One forward per step: one schedule cycle each (sync_uses: units fetched out of schedule).
streamed = after["streamed_bytes_per_cycle"] * cfg["steps"]
sync_uses = after["sync_uses"] - before["sync_uses"]
session.close()
client.close()
say("RESULT", steps_s=times, streamed_bytes=streamed, sync_uses=sync_uses)
"""


def parse_args(argv: List[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ddod", required=True, help="the ddod binary")
    parser.add_argument("--devices", default="cuda:0,cuda:1",
                        help="the runners' devices, comma-separated (default cuda:0,cuda:1)")
    parser.add_argument("--cap", type=float, default=16.0,
                        help="VRAM cap of each runner in GiB: ddod's session + the runner's "
                             "allocations (default 16)")
    parser.add_argument("--reserve", type=float, default=1.5,
                        help="DDO_ACTIVATION_RESERVE_GB of each session (default 1.5)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--resolution", type=int, default=1024)
    parser.add_argument("--text-tokens", type=int, default=512)
    parser.add_argument("--json-out", help="write every figure here")
    return parser.parse_args(argv)


def meminfo() -> Dict[str, int]:
    values = {}
    with open("/proc/meminfo") as file:
        for line in file:
            name, _, rest = line.partition(":")
            values[name] = int(rest.split()[0]) * 1024
    return values


class Runner:
    """One runner process: set up (session open, learning forward, warm-up), then timed
    steps when told to go."""

    def __init__(self, cfg: Dict[str, Any], env: Dict[str, str]) -> None:
        self.cfg = cfg
        # stderr to a file: a full pipe would stop the runner.
        self.stderr_path = Path(cfg["output"]).with_suffix(".stderr")
        with open(self.stderr_path, "w") as stderr:
            self.proc = subprocess.Popen([sys.executable, "-c", RUNNER, json.dumps(cfg)],
                                         env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=stderr, text=True)

    def expect(self, kind: str) -> Dict[str, Any]:
        for line in self.proc.stdout:
            if line.startswith(kind + " "):
                return json.loads(line[len(kind) + 1:])
        self.proc.wait(timeout=60)
        raise RuntimeError(f"runner on {self.cfg['device']} exited {self.proc.returncode} "
                           f"before {kind}:\n{self.stderr_path.read_text()[-3000:]}")

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def finish(self) -> Dict[str, Any]:
        result = self.expect("RESULT")
        if self.proc.wait(timeout=120) != 0:
            raise RuntimeError(f"runner on {self.cfg['device']} exited {self.proc.returncode}")
        return result


def run_phase(devices: List[str], base: Dict[str, Any], env: Dict[str, str], work: Path,
              label: str) -> List[Dict[str, Any]]:
    """Starts a runner per device, lets them all set up, then starts their timed steps at
    once; returns each runner's figures."""
    runners = [Runner(dict(base, device=device, output=str(work / f"{label}-{i}.pt")), env)
               for i, device in enumerate(devices)]
    try:
        ready = [runner.expect("READY") for runner in runners]
        shmem = meminfo()["Shmem"]
        for runner in runners:
            runner.go()
        results = [runner.finish() for runner in runners]
    finally:
        for runner in runners:
            if runner.proc.poll() is None:
                runner.proc.kill()
    figures = []
    for runner, up, result in zip(runners, ready, results):
        device = runner.cfg["device"]
        step = flux.median(result["steps_s"])
        per_step = result["streamed_bytes"] / len(result["steps_s"])
        figures.append({"device": device, "device_uuid": up["device_uuid"],
                        "session_device_bytes": up["session_device_bytes"],
                        "steps_s": result["steps_s"], "step_s": step,
                        "streamed_bytes_per_step": per_step,
                        "h2d_gbps": per_step / step / 1e9 if step else None,
                        "sync_uses": result["sync_uses"],
                        "output": runner.cfg["output"],
                        "shmem_bytes_while_streaming": shmem})
        flux.log(f"{label}: {device} ({up['device_uuid']}): {step:.3f} s/step, "
                 f"{per_step / 1e9:.2f} GB/step, H2D {per_step / step / 1e9:.1f} GB/s")
    return figures


def main(argv: List[str]) -> int:
    args = parse_args(argv)
    os.environ.update(NO_MULTICAST)
    import torch

    devices = [item.strip() for item in args.devices.split(",") if item.strip()]
    if len(devices) != 2:
        flux.fail("--devices takes two devices")
    for device in devices:
        index = torch.device(device).index or 0
        if index >= torch.cuda.device_count():
            flux.fail(f"{device}: this machine has {torch.cuda.device_count()} GPU(s)")
    config = dict(flux.FULL_CONFIG)
    figures: Dict[str, Any] = {"devices": devices, "cap_gib": args.cap,
                               "gpus": [torch.cuda.get_device_name(i)
                                        for i in range(torch.cuda.device_count())]}
    work = Path(tempfile.mkdtemp(prefix="ddo-2gpu-", dir="/tmp"))
    ddod = flux.Ddod(args.ddod, work, [])
    try:
        from diffusers_dynamic_offloader import DdoClient

        memory_before = meminfo()
        flux.log("building the FLUX.1-dev-size model with random weights...")
        model = flux.random_flux_on_gpu(config, devices[0])
        model_bytes = flux.parameter_bytes(model)
        torch.nn.Module.to(model, "cpu")
        flux.release_memory()
        client = DdoClient.connect(ddod.address, timeout=600)
        started = time.perf_counter()
        client.register_module(flux.KEY, model, progress=False)
        flux.log(f"registered {model_bytes / GIB:.2f} GiB in {time.perf_counter() - started:.1f} s")
        del model
        import gc

        gc.collect()
        pool = client.stats().pool
        figures["component_bytes"] = model_bytes
        figures["pool"] = {"used_bytes": pool.used_bytes, "pinned_bytes": pool.pinned_bytes,
                           "reserved_bytes": pool.reserved_bytes, "components": pool.components}
        figures["shmem_before_bytes"] = memory_before["Shmem"]
        env = dict(os.environ, DDO_DAEMON=ddod.address)
        base = {"address": ddod.address, "key": flux.KEY, "config": config,
                "settings": {"DDO_VRAM_BUDGET_GB": f"{args.cap:g}",
                             "DDO_ACTIVATION_RESERVE_GB": f"{args.reserve:g}",
                             "DDO_STREAM_UNIT": "linear"},
                "cap_gib": args.cap, "steps": args.steps, "warmup": args.warmup,
                "resolution": args.resolution, "text_tokens": args.text_tokens}
        figures["alone"] = [run_phase([device], base, env, work, f"alone{i}")[0]
                            for i, device in enumerate(devices)]
        figures["together"] = run_phase(devices, base, env, work, "together")
        reference = torch.load(figures["alone"][0]["output"])
        figures["bitwise_equal_to_first_alone"] = {
            f"{phase}:{i}:{run['device']}": bool(torch.equal(torch.load(run["output"]), reference))
            for phase in ("alone", "together") for i, run in enumerate(figures[phase])}
        pool = client.stats().pool
        figures["pool_after"] = {"used_bytes": pool.used_bytes, "pinned_bytes": pool.pinned_bytes,
                                 "components": pool.components}
        client.close()
    finally:
        figures["ddod_exit"] = ddod.stop()
    report(figures)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=1))
    return 0 if all(figures["bitwise_equal_to_first_alone"].values()) else 1


def report(figures: Dict[str, Any]) -> None:
    size = figures["component_bytes"]
    pool = figures["pool_after"]
    shmem = max(run["shmem_bytes_while_streaming"] for run in figures["together"])
    print(f"\nFLUX.1-dev-size transformer, {size / GIB:.2f} GiB bf16; cap {figures['cap_gib']:g} "
          f"GiB per runner; GPUs: {', '.join(figures['gpus'])}")
    print(f"host copy: ddod's pool holds {pool['components']} component(s), "
          f"{pool['used_bytes'] / GIB:.2f} GiB used, {pool['pinned_bytes'] / GIB:.2f} GiB pinned "
          f"= {pool['used_bytes'] / size:.2f}x the component; Shmem while both stream "
          f"{(shmem - figures['shmem_before_bytes']) / GIB:.2f} GiB above the start")
    print(f"\n  {'run':<10}{'device':<10}{'s/step':>9}{'GB/step':>9}{'H2D GB/s':>10}  bitwise")
    for phase in ("alone", "together"):
        for i, run in enumerate(figures[phase]):
            equal = figures["bitwise_equal_to_first_alone"][f"{phase}:{i}:{run['device']}"]
            print(f"  {phase:<10}{run['device']:<10}{run['step_s']:>9.3f}"
                  f"{run['streamed_bytes_per_step'] / 1e9:>9.2f}{run['h2d_gbps']:>10.1f}  "
                  f"{'equal' if equal else 'DIFFERENT'}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
