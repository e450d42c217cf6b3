"""A tower of square Linear layers for the file-tier and phase tests (issue 33), its
safetensors checkpoint, and a sampler of a process's resident memory."""

from __future__ import annotations

import json
import struct
import threading
import time
from typing import Dict, List

import torch
from torch import nn


class Tower(nn.Module):
    """``layers`` square Linear layers of ``width`` without bias, each followed by a bounded
    activation."""

    def __init__(self, width: int, layers: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width, bias=False) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.tanh(layer(x))
        return x


def built_tower(width: int, layers: int, seed: int) -> Tower:
    """A tower with seeded weights, doubled to keep the activations away from zero."""
    torch.manual_seed(seed)
    with torch.no_grad():
        tower = Tower(width, layers)
        for layer in tower.layers:
            layer.weight.mul_(2.0)
    return tower.eval().requires_grad_(False)


def write_checkpoint(path: str, tower: Tower) -> int:
    """Writes the tower's weights as one safetensors file, a tensor at a time (never the
    whole file in memory); returns the tensor bytes."""
    state = tower.state_dict()
    header: Dict[str, object] = {}
    offset = 0
    for name, tensor in state.items():
        size = tensor.numel() * tensor.element_size()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape),
                        "data_offsets": [offset, offset + size]}
        offset += size
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", len(encoded)) + encoded)
        for tensor in state.values():
            file.write(tensor.contiguous().numpy().tobytes())
    return offset


class MemorySampler:
    """Samples a process's RssAnon + RssShmem (bytes) every 20 ms on a thread."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: List[int] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def resident(self) -> int:
        fields = {}
        with open(f"/proc/{self.pid}/status") as status:
            for line in status:
                name, _, value = line.partition(":")
                if name in ("RssAnon", "RssShmem"):
                    fields[name] = int(value.split()[0]) * 1024
        return fields.get("RssAnon", 0) + fields.get("RssShmem", 0)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append(self.resident())
            time.sleep(0.02)

    def __enter__(self) -> "MemorySampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
