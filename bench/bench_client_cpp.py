"""The C++ client against the Python client on one model (issue 18's device goals).

For each model size: the C++ example runner (client-cpp/examples/transformer_runner) stores the
model in a private ddod and streams it on the device; then this process binds the same
component into the Python twin of the model (client-cpp/examples/transformer_model.py) and
streams it with the same settings; then runs the twin with all its weights on the device. It
prints per model

  * B: pinned host-to-device bandwidth (torch copy from a pinned tensor, median of 7), and the
    bound S/B for the S bytes a step streams;
  * the median step time (after the learning forward) of the C++ runner, of the Python client
    and of the all-on-device model, and the ratio C++ / Python (goal: <= 1.05);
  * the Python client twice: on its Python consumer and on the C++ one (DDO_CLIENT_CONSUMER,
    client-cpp/python/ddo_consumer_ext.cc), and their ratio;
  * each consumer's per-unit overhead (CPU time of acquire and release, its own counters;
    goals: C++ < 5 us, Python with the C++ consumer < 10 us), and the wall time per unit
    (step time / units: everything the host does per streamed Linear, compute included,
    which is what the consumer's own counter leaves out).

    LD_LIBRARY_PATH=.bundle/lib python3 bench/bench_client_cpp.py --ddod .bundle/bin/ddod \\
        --runner build-device/bin/transformer_runner --json-out out.json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Dict, List

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_flux_stream import Ddod, log, pinned_h2d_gbps  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
# name: (dim, heads, blocks, tokens): many small units (overhead-bound) and fewer large ones
# (bandwidth-bound).
MODELS = {"small": (512, 8, 16, 64), "large": (2048, 16, 8, 1024)}


def load_twin():
    path = ROOT / "client-cpp" / "examples" / "transformer_model.py"
    spec = importlib.util.spec_from_file_location("transformer_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Transformer


def run_cpp(runner: str, address: str, key: str, shape, args) -> Dict[str, Any]:
    dim, heads, blocks, tokens = shape
    command = [runner, "--device", args.device, "--dim", str(dim), "--heads", str(heads),
               "--blocks", str(blocks), "--tokens", str(tokens), "--steps", str(args.steps),
               "--unit", args.unit, "--dtype", "bfloat16", "--key", key, "--check",
               "--setting", "DDO_SMALL_TENSOR_THRESHOLD_KB=0"]
    log(" ".join(command))
    done = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, DDO_DAEMON=address))
    if done.returncode != 0:
        raise RuntimeError(f"transformer_runner failed ({done.returncode}):\n"
                           f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    steps = [float(value) for value in re.findall(r"^step \d+: ([0-9.]+) s", done.stdout, re.M)]
    counters = re.search(r"units (\d+), ring slots (\d+).*overhead ([0-9.]+) us/unit",
                         done.stdout)
    check = re.search(r"check: (\d+) of (\d+)", done.stdout)
    return {"step_s": statistics.median(steps[1:]), "steps_s": steps,
            "units": int(counters.group(1)), "ring_slots": int(counters.group(2)),
            "overhead_us_per_unit": float(counters.group(3)),
            "bitwise_equal": check.group(1) == check.group(2), "stdout": done.stdout}


def timed_steps(model, inputs, steps: int, torch) -> List[float]:
    times = []
    with torch.no_grad():
        for step in range(steps):
            started = time.perf_counter()
            model(inputs[step])
            if inputs[step].is_cuda:
                torch.cuda.synchronize()
            times.append(time.perf_counter() - started)
    return times


def run_python(client, key: str, shape, args, torch, consumer: str,
               resident: bool) -> Dict[str, Any]:
    """The Python client streaming the twin with ``consumer`` (DDO_CLIENT_CONSUMER); with
    ``resident``, also the twin with every weight on the device."""
    dim, heads, blocks, tokens = shape
    os.environ["DDO_CLIENT_CONSUMER"] = consumer
    if hasattr(torch, "set_default_device"):  # torch >= 2.0: no initialisation to pay
        with torch.device("meta"):
            model = load_twin()(dim, heads, blocks).to(torch.bfloat16)
        model = model.to_empty(device="cpu").eval()
    else:
        model = load_twin()(dim, heads, blocks).to(torch.bfloat16).eval()
    generator = torch.Generator().manual_seed(2)
    inputs = [torch.randn(1, tokens, 64, generator=generator).to(torch.bfloat16).to(args.device)
              for _ in range(args.steps)]
    settings = {"DDO_SMALL_TENSOR_THRESHOLD_KB": "0", "DDO_STREAM_UNIT": args.unit}
    with client.attach(key) as attached:
        attached.bind(model)
        with client.stream(model, key, device=args.device, settings=settings) as session:
            streamed = timed_steps(model, inputs, args.steps, torch)
            stats = session.stats()
        if stats["consumer"] != consumer:
            raise RuntimeError(f"DDO_CLIENT_CONSUMER={consumer}, but the session streamed "
                               f"with the {stats['consumer']} consumer")
        figures = {"step_s": statistics.median(streamed[1:]), "steps_s": streamed,
                   "overhead_us_per_unit": float(stats["overhead_us_per_unit"]),
                   "units": int(stats["units"])}
        figures["wall_us_per_unit"] = figures["step_s"] / figures["units"] * 1e6
        if resident:
            on_device = model.to(args.device)
            timed_steps(on_device, inputs, 2, torch)  # warm-up
            figures["resident_step_s"] = statistics.median(
                timed_steps(on_device, inputs, args.steps, torch))
            del on_device
        del model
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ddod", required=True, help="the ddod binary")
    parser.add_argument("--runner", required=True, help="client-cpp's transformer_runner")
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--unit", default="linear", help="DDO_STREAM_UNIT (linear)")
    parser.add_argument("--steps", type=int, default=8, help="forwards per run (8)")
    parser.add_argument("--models", default="small,large", help=f"of {', '.join(MODELS)}")
    parser.add_argument("--json-out", help="write the figures here")
    args = parser.parse_args()

    import torch

    from diffusers_dynamic_offloader import DdoClient

    on_gpu = args.device.startswith("cuda")
    # The host backend ("cpu") has no PCIe bound: the figures are then the consumers' own.
    figures: Dict[str, Any] = {
        "device": torch.cuda.get_device_name(args.device) if on_gpu else "cpu (host backend)",
        "h2d": pinned_h2d_gbps(1 << 30, 7) if on_gpu else {"gbps_median": None}, "models": {}}
    bandwidth = figures["h2d"]["gbps_median"]
    with tempfile.TemporaryDirectory(prefix="ddo-bench-cpp-") as work:
        daemon = Ddod(args.ddod, Path(work), [])
        try:
            client = DdoClient.connect(daemon.address)
            for name in args.models.split(","):
                shape = MODELS[name]
                key = f"bench-cpp-{name}"
                cpp = run_cpp(args.runner, daemon.address, key, shape, args)
                cpp["wall_us_per_unit"] = cpp["step_s"] / cpp["units"] * 1e6
                python = run_python(client, key, shape, args, torch, "python", resident=True)
                python_cpp = run_python(client, key, shape, args, torch, "cpp", resident=False)
                streamed_bytes = client.component(key).total_bytes
                figures["models"][name] = {
                    "shape": dict(zip(("dim", "heads", "blocks", "tokens"), shape)),
                    "component_bytes": streamed_bytes,
                    "bound_s": streamed_bytes / bandwidth / 1e9 if bandwidth else None,
                    "cpp": {k: v for k, v in cpp.items() if k != "stdout"}, "python": python,
                    "python_cpp_consumer": python_cpp,
                    "cpp_over_python": cpp["step_s"] / python["step_s"],
                    "cpp_consumer_over_python_consumer": python_cpp["step_s"] / python["step_s"]}
                client.evict(key)
            client.close()
        finally:
            daemon.stop()

    print(f"device {figures['device']}, B pinned H2D "
          f"{f'{bandwidth:.1f} GB/s' if bandwidth else '-'}, unit {args.unit}, bf16, "
          f"median of steps 2..{args.steps}")
    for name, row in figures["models"].items():
        cpp, python, python_cpp = row["cpp"], row["python"], row["python_cpp_consumer"]
        bound = f"{row['bound_s'] * 1e3:.2f} ms" if row["bound_s"] else "-"
        print(f"{name}: {row['shape']}, {row['component_bytes'] / 2**20:.0f} MiB, "
              f"{cpp['units']} units, bound S/B {bound}")
        print(f"  all on device     {python['resident_step_s'] * 1e3:8.2f} ms")
        for label, figures_of in (("C++ runner", cpp), ("Python, Python consumer", python),
                                  ("Python, C++ consumer", python_cpp)):
            print(f"  {label:24s}{figures_of['step_s'] * 1e3:8.2f} ms   consumer overhead "
                  f"{figures_of['overhead_us_per_unit']:6.2f} us/unit   wall "
                  f"{figures_of['wall_us_per_unit']:6.2f} us/unit")
        print(f"  C++ runner bitwise equal to all-on-device: {cpp['bitwise_equal']}")
        print(f"  C++ runner / Python (Python consumer)       {row['cpp_over_python']:.3f}  "
              f"(goal <= 1.05)")
        print(f"  Python: C++ consumer / Python consumer      "
              f"{row['cpp_consumer_over_python_consumer']:.3f}")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
