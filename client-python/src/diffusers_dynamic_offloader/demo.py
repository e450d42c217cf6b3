"""Connects to ddod (starting a private one when none runs), prints what it reports, then
shares a small synthetic model: this process registers it, a second process attaches it, and
this process runs it with its weights streamed by ddod.

    python -m diffusers_dynamic_offloader.demo [--address ADDRESS] [--no-embedded] [--model-mb N]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from typing import List, Optional

from .client import DdoClient
from .errors import DdoError
from .info_format import format_daemon_info


DEMO_KEY = "ddo-demo/synthetic-mlp:fp32"

# Run by the second process: attach, bind into a fresh module, run it, report.
_SECOND_PROCESS = r"""
import sys, time
started = time.perf_counter()
import torch
imported = time.perf_counter()
from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader.demo import build_model
model = build_model(int(sys.argv[1]), seed=1)  # other random weights, replaced by the bind
built = time.perf_counter()
with DdoClient.connect(allow_embedded=False) as client, client.attach(sys.argv[2]) as weights:
    attached = time.perf_counter()
    weights.bind(model)
    out = model(torch.ones(1, model[0].in_features))
    print(f"{imported - started:.3f} {attached - built:.3f} {float(out.sum()):.6f}")
"""


def build_model(size_mb: int, seed: int):
    """A stack of 1024x1024 float32 Linear layers of about ``size_mb`` MiB."""
    import torch

    torch.manual_seed(seed)
    layers = max(1, size_mb // 4)
    return torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(layers)]).eval()


def share_model(client: DdoClient, size_mb: int) -> None:
    """Registers a model here and attaches it from a second process; prints both timings."""
    import torch

    model = build_model(size_mb, seed=0)
    with torch.no_grad():
        expected = float(model(torch.ones(1, 1024)).sum())
    started = time.perf_counter()
    component = client.register_module(DEMO_KEY, model, progress=False)
    registered = time.perf_counter() - started
    print(f"model:     {component.total_bytes / 2**20:.0f} MiB registered as '{DEMO_KEY}' "
          f"in {registered:.3f} s (warm hit: {component.warm_hit})")
    env = dict(os.environ, DDO_DAEMON=client.address)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), env.get("PYTHONPATH")]))
    started = time.perf_counter()
    second = subprocess.run([sys.executable, "-c", _SECOND_PROCESS, str(size_mb), DEMO_KEY],
                            env=env, check=True, capture_output=True, text=True)
    wall = time.perf_counter() - started
    torch_s, attach_s, output = second.stdout.split()
    same = abs(float(output) - expected) < 1e-3
    print(f"second:    a new process imported torch in {float(torch_s):.3f} s, then connected and "
          f"attached in {float(attach_s):.3f} s ({wall:.2f} s wall); its output "
          f"{'matches' if same else 'DIFFERS from'} this process's")
    stream_model(client, model, expected)


def stream_model(client: DdoClient, model, expected: float) -> None:
    """Runs the model with its Linear weights streamed by ddod: on the GPU when there is one,
    else on the host backend (device "cpu"); prints what the session did."""
    import torch

    device = "cuda:0" if torch.cuda.is_available() else "cpu"
    started = time.perf_counter()
    # A ring of 2 slots and nothing resident but the biases: every weight streams.
    with client.stream(model, DEMO_KEY, device=device,
                       settings={"DDO_RING_SLOTS": "2", "DDO_SMALL_TENSOR_THRESHOLD_KB": "0"}) as session:
        opened = time.perf_counter() - started
        with torch.no_grad():
            inputs = torch.ones(1, 1024, device=device)
            outputs = [float(model(inputs).sum()) for _ in range(3)]
        stats = session.stats()
    same = all(abs(output - expected) < 1e-3 for output in outputs)
    print(f"stream:    on {device}: session opened in {opened:.3f} s; 3 forwards streamed "
          f"{stats['units']} units (up to {stats['ring_slots']} in flight) "
          f"({stats['sync_uses']} out of schedule while learning, then {stats['streamed_uses']} "
          f"in schedule, {stats['overhead_us_per_unit']:.0f} us per unit); outputs "
          f"{'match' if same else 'DIFFER from'} the unstreamed model's")


def main(argv: Optional[List[str]] = None) -> int:
    """Runs the demo; returns the process exit code."""
    parser = argparse.ArgumentParser(
        prog="python -m diffusers_dynamic_offloader.demo", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--address", help="the daemon's address (default: DDO_DAEMON, then the default sockets)"
    )
    parser.add_argument(
        "--no-embedded",
        action="store_true",
        help="fail instead of starting a private ddod when no daemon answers",
    )
    parser.add_argument("--model-mb", type=int, default=64,
                        help="size of the synthetic model to share (0: skip; default 64)")
    args = parser.parse_args(argv)
    try:
        with DdoClient.connect(
            args.address, allow_embedded=False if args.no_embedded else None
        ) as client:
            print(format_daemon_info(client.info()))
            print(f"health:    {client.health()}")
            print(f"lease:     {client.lease_id}")
            if args.model_mb > 0:
                share_model(client, args.model_mb)
            if client.embedded:
                print(f"this demo started a private ddod (pid {client.embedded_pid}); stopping it")
    except DdoError as error:
        print(f"demo: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
