"""Helpers of the component store tests: deterministic tensors, byte digests, a tiny safetensors
writer, /dev/shm inspection and child processes.

Child interpreters import this module too (the tests' directory is on their PYTHONPATH), so it
imports only torch and the standard library.
"""

from __future__ import annotations

import ctypes
import glob
import hashlib
import json
import os
import select
import signal
import struct
import subprocess
import sys
from collections import OrderedDict
from typing import Dict, List, Mapping, Optional, Sequence

import torch

TESTS_DIR = os.path.dirname(os.path.abspath(__file__))
SOURCE_ROOT = os.path.join(os.path.dirname(os.path.dirname(TESTS_DIR)), "client-python", "src")
SHM_DIR = "/dev/shm"

#: safetensors dtype names of the torch dtypes these tests use.
SAFETENSORS_DTYPES = {
    torch.float64: "F64",
    torch.float32: "F32",
    torch.float16: "F16",
    torch.bfloat16: "BF16",
    torch.int64: "I64",
    torch.int32: "I32",
    torch.int16: "I16",
    torch.int8: "I8",
    torch.uint8: "U8",
    torch.bool: "BOOL",
}
for _name, _code in (("float8_e4m3fn", "F8_E4M3"), ("float8_e5m2", "F8_E5M2")):
    if hasattr(torch, _name):
        SAFETENSORS_DTYPES[getattr(torch, _name)] = _code


def deterministic_state_dict(
    seed: int = 0, *, big_mib: int = 1
) -> "OrderedDict[str, torch.Tensor]":
    """About ``big_mib`` + 1.3 MiB of random tensors of every common dtype (bfloat16 included,
    float8 when this torch has it), a 0-d tensor and a non-contiguous one; the same for the
    same seed in every process."""
    generator = torch.Generator().manual_seed(seed)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    def integers(low: int, high: int, *shape: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.randint(low, high, shape, generator=generator, dtype=torch.int64).to(dtype)

    tensors: "OrderedDict[str, torch.Tensor]" = OrderedDict()
    tensors["blocks.0.attn.to_q.weight"] = normal(256 * big_mib, 1024)  # float32, big_mib MiB
    tensors["blocks.0.attn.to_q.bias"] = normal(1024)
    tensors["blocks.0.norm.weight"] = normal(512, 512).to(torch.float16)
    tensors["blocks.1.mlp.weight"] = normal(512, 512).to(torch.bfloat16)
    tensors["blocks.1.mlp.bias"] = normal(4096).to(torch.float64)
    tensors["embed.position_ids"] = integers(-(2**62), 2**62, 1000, dtype=torch.int64)
    tensors["embed.i32"] = integers(-(2**31), 2**31 - 1, 333, dtype=torch.int32)
    tensors["quant.i16"] = integers(-(2**15), 2**15 - 1, 17, 3, dtype=torch.int16)
    tensors["quant.i8"] = integers(-128, 127, 255, dtype=torch.int8)
    tensors["quant.u8"] = integers(0, 255, 64, 64, dtype=torch.uint8)
    tensors["mask"] = integers(0, 2, 77, dtype=torch.bool)
    tensors["scale"] = normal(1).reshape(())  # 0-d
    tensors["proj.weight_t"] = normal(64, 32).t()  # not contiguous
    if hasattr(torch, "float8_e4m3fn"):
        tensors["fp8.e4m3"] = normal(128).to(torch.float8_e4m3fn)
        tensors["fp8.e5m2"] = normal(128).to(torch.float8_e5m2)
    return tensors


def raw_bytes(tensor: torch.Tensor) -> bytes:
    """The contiguous little-endian bytes of a tensor (bool as 0/1 bytes)."""
    flat = tensor.detach().to("cpu").contiguous()
    size = flat.numel() * flat.element_size()
    return ctypes.string_at(flat.data_ptr(), size) if size else b""


def digest(tensor: torch.Tensor) -> List[object]:
    """``[dtype, shape, sha256 of the bytes]``: equal exactly when the tensors are bitwise equal."""
    return [str(tensor.dtype), list(tensor.shape), hashlib.sha256(raw_bytes(tensor)).hexdigest()]


def digests(tensors: Mapping[str, torch.Tensor]) -> Dict[str, List[object]]:
    return {name: digest(tensor) for name, tensor in tensors.items()}


def total_bytes(tensors: Mapping[str, torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors.values())


# safetensors files, written by hand (no dependency on the safetensors package).


def safetensors_header(
    tensors: Mapping[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None
) -> "tuple[Dict[str, object], bytes]":
    """The header dict and the data of ``tensors``, packed in order."""
    header: Dict[str, object] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    chunks = []
    offset = 0
    for name, tensor in tensors.items():
        data = raw_bytes(tensor)
        header[name] = {
            "dtype": SAFETENSORS_DTYPES[tensor.dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        chunks.append(data)
    return header, b"".join(chunks)


def write_raw_safetensors(
    path: str, header: bytes, data: bytes, *, declared_length: Optional[int] = None
) -> str:
    """8-byte little-endian header length (``declared_length`` or the real one), the header
    padded with spaces to a multiple of 8, then ``data``."""
    header = header + b" " * (-len(header) % 8)
    length = len(header) if declared_length is None else declared_length
    with open(path, "wb") as file:
        file.write(struct.pack("<Q", length) + header + data)
    return path


def write_safetensors(
    path: str, tensors: Mapping[str, torch.Tensor], metadata: Optional[Dict[str, str]] = None
) -> str:
    """A valid safetensors file of ``tensors``."""
    header, data = safetensors_header(tensors, metadata)
    return write_raw_safetensors(path, json.dumps(header).encode(), data)


def write_index(path: str, weight_map: Mapping[str, str], total_size: int) -> str:
    """A ``*.safetensors.index.json``."""
    with open(path, "w") as file:
        json.dump({"metadata": {"total_size": total_size}, "weight_map": dict(weight_map)}, file)
    return path


# /dev/shm.


def segment_file(shm_name: str) -> str:
    return os.path.join(SHM_DIR, shm_name.lstrip("/"))


def pool_prefix(shm_name: str) -> str:
    """``"ddo-1000-ab12cd34ef56-"``: the part of a segment name shared by its whole pool (the
    name ends with 16 random hex digits)."""
    bare = shm_name.lstrip("/")
    assert len(bare) > 17 and bare[-17] == "-", f"unexpected segment name {shm_name!r}"
    return bare[:-16]


def pool_files(prefix: str) -> List[str]:
    """The /dev/shm files of one pool."""
    return sorted(glob.glob(os.path.join(SHM_DIR, glob.escape(prefix) + "*")))


def pool_namespaces(state_dir: str) -> List[str]:
    """The pool namespaces that have a directory (``pool-<12 hex>``) under ``state_dir``."""
    return [
        os.path.basename(path)[len("pool-") :]
        for path in glob.glob(os.path.join(state_dir, "pool-*"))
    ]


def manifest_paths(state_dir: str) -> List[str]:
    return sorted(glob.glob(os.path.join(state_dir, "pool-*", "manifest.json")))


def mappings_of(pid: int, path: str) -> List[Dict[str, object]]:
    """The mappings of ``path`` in process ``pid`` from /proc/<pid>/smaps: for each, its
    ``perms`` and the smaps counters in kB (``Rss``, ``Shared_Clean``, ...)."""
    found: List[Dict[str, object]] = []
    current: Optional[Dict[str, object]] = None
    with open(f"/proc/{pid}/smaps") as smaps:
        for line in smaps:
            fields = line.split()
            if not fields:
                continue
            if "-" in fields[0] and len(fields) >= 5 and not fields[0].endswith(":"):
                current = None
                if len(fields) >= 6 and fields[5] == path:
                    current = {"perms": fields[1], "deleted": fields[-1] == "(deleted)"}
                    found.append(current)
            elif current is not None and fields[0].endswith(":") and len(fields) >= 2:
                try:
                    current[fields[0][:-1]] = int(fields[1])
                except ValueError:
                    pass
    return found


# Child processes.


def child_env(address: str, **variables: str) -> Dict[str, str]:
    """The environment of a child interpreter that connects to ``address`` and can import
    the package under test and this module."""
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([SOURCE_ROOT, TESTS_DIR]),
        DDO_DAEMON=address,
        **variables,
    )


class Child:
    """A child interpreter running ``script``, talking JSON lines over stdout and plain lines
    over stdin."""

    def __init__(self, script: str, env: Dict[str, str], *args: str) -> None:
        # Unbuffered: read() selects on the pipe, and a buffered reader could hold a whole
        # line the pipe no longer shows (two lines written at once).
        self.proc = subprocess.Popen(
            [sys.executable, "-c", script, *args],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            bufsize=0,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def read(self, timeout: float = 30) -> Dict[str, object]:
        """The next JSON line; fails with the child's stderr when there is none in time."""
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            self.kill()
            raise AssertionError(
                f"child {self.pid} sent nothing within {timeout} s "
                f"(exit {self.proc.returncode}); stderr:\n{self.stderr()}"
            )
        return json.loads(line)

    def send(self, line: str = "") -> None:
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 30) -> int:
        """Closes stdin, waits for the exit and returns the code."""
        try:
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"child {self.pid} did not exit; stderr:\n{self.stderr()}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stderr(self) -> str:
        if self.proc.poll() is None:
            return "(still running)"
        return self.proc.stderr.read().decode(errors="replace")

    def close(self) -> None:
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except BrokenPipeError:
                pass


def sizes_mentioned(message: str, sizes: Sequence[int]) -> bool:
    """True when ``message`` gives every size in ``sizes`` in some usual rendering (bytes,
    KiB, MiB or GiB with 0 to 2 decimals)."""

    def renderings(size: int) -> List[str]:
        found = [str(size), f"{size:,}"]
        for unit, scale in (("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30)):
            value = size / scale
            for text in (f"{value:.0f}", f"{value:.1f}", f"{value:.2f}", f"{value:g}"):
                found += [f"{text} {unit}", f"{text}{unit}"]
        return found

    return all(any(text in message for text in renderings(size)) for size in sizes)
