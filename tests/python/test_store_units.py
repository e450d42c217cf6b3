"""The client's building blocks without a daemon: dtypes, hashing, shared-memory mappings and
progress reporting."""

import os
import sys
import uuid

import pytest
import torch
import xxhash

from diffusers_dynamic_offloader import DdoError, MissingDependencyError, TensorTableError
from diffusers_dynamic_offloader import dtypes, hashing, progress, shm
from diffusers_dynamic_offloader._proto import components_pb2
from store_support import deterministic_state_dict, digest, raw_bytes


def test_every_torch_dtype_round_trips():
    expected = {
        torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.int64, torch.int32,
        torch.int16, torch.int8, torch.uint8, torch.bool,
    }
    for name in ("float8_e4m3fn", "float8_e5m2", "uint16", "uint32", "uint64"):
        if hasattr(torch, name):
            expected.add(getattr(torch, name))
    assert set(dtypes.supported_torch_dtypes()) == expected
    codes = set()
    for dtype in expected:
        code = dtypes.to_proto(dtype)
        codes.add(code)
        assert dtypes.to_torch(code) is dtype
        assert dtypes.itemsize(code) == torch.empty((), dtype=dtype).element_size()
    assert len(codes) == len(expected)
    assert dtypes.to_proto(torch.bfloat16) == components_pb2.DTYPE_BF16
    assert dtypes.safetensors_name(components_pb2.DTYPE_BF16) == "BF16"


def test_unsupported_dtypes():
    with pytest.raises(TensorTableError, match="tensor 'x' has dtype torch.complex64"):
        dtypes.to_proto(torch.complex64, tensor_name="x")
    with pytest.raises(TensorTableError, match="DTYPE_UNSPECIFIED"):
        dtypes.itemsize(components_pb2.DTYPE_UNSPECIFIED)
    with pytest.raises(TensorTableError, match="DType\\(99\\)"):
        dtypes.to_torch(99)
    if not hasattr(torch, "float8_e4m3fn"):
        with pytest.raises(TensorTableError, match="'f8' is DTYPE_F8_E4M3: torch .* no such"):
            dtypes.to_torch(components_pb2.DTYPE_F8_E4M3, tensor_name="f8")


def test_content_hash_is_xxh3_of_the_bytes_in_order():
    tensors = list(deterministic_state_dict(0).values())
    reference = xxhash.xxh3_64(b"".join(raw_bytes(tensor) for tensor in tensors)).hexdigest()
    assert hashing.content_hash(tensors) == f"xxh3-64:{reference}"
    assert hashing.content_hash([]) == "xxh3-64:2d06800538d394c2"  # XXH3-64 of nothing
    assert hashing.content_hash(tensors[::-1]) != hashing.content_hash(tensors)
    seen = []
    hashing.content_hash(tensors, on_bytes=seen.append)
    assert sum(seen) == sum(len(raw_bytes(tensor)) for tensor in tensors)
    assert hashing.is_hash("xxh3-64:0123456789abcdef")
    assert not hashing.is_hash("xxh3-64:0123456789ABCDEF")


def test_content_hash_without_xxhash(monkeypatch):
    monkeypatch.setitem(sys.modules, "xxhash", None)
    with pytest.raises(MissingDependencyError, match="pip install xxhash"):
        hashing.content_hash([torch.zeros(3)])


@pytest.fixture
def segment():
    """A 4 MiB file in /dev/shm, as ddod would create it, removed afterwards."""
    name = f"/ddo-test-{uuid.uuid4().hex}"
    path = shm.segment_path(name)
    with open(path, "wb") as file:
        file.truncate(4 << 20)
    yield name
    os.unlink(path)


def test_segment_write_and_zero_copy_views(segment):
    original = deterministic_state_dict(5)
    placements = []
    offset = 0
    with shm.SegmentMapping(segment, 4 << 20, writable=True) as writer:
        for name, tensor in original.items():
            data = hashing.tensor_bytes(tensor)
            writer.write(offset, data, chunk_bytes=4096)
            placements.append((name, offset, data.numel(), tensor.dtype, list(tensor.shape)))
            offset += -(-data.numel() // 256) * 256
    reader = shm.SegmentMapping(segment, 4 << 20, writable=False)
    views = {
        name: reader.tensor(start, size, dtype, shape)
        for name, start, size, dtype, shape in placements
    }
    for name, tensor in original.items():
        assert digest(views[name]) == digest(tensor), name
    with pytest.raises(DdoError, match="read-only"):
        reader.write(0, torch.zeros(4, dtype=torch.uint8))
    with pytest.raises(DdoError, match="outside"):
        reader.tensor((4 << 20) - 4, 8, torch.float32, [2])
    with pytest.raises(DdoError, match="cannot hold"):
        reader.tensor(0, 12, torch.float32, [2])
    # Views keep the mapping alive: close() leaves unmapping to the last of them.
    assert reader.close() is False
    assert digest(views["blocks.1.mlp.weight"]) == digest(original["blocks.1.mlp.weight"])
    another = shm.SegmentMapping(segment, 4 << 20, writable=False)
    assert another.close() is True and another.closed
    assert another.close() is True


def test_segment_errors(segment):
    with pytest.raises(DdoError, match="holds 4194304 bytes, but ddod said 8388608"):
        shm.SegmentMapping(segment, 8 << 20, writable=False)
    with pytest.raises(DdoError, match="cannot open"):
        shm.SegmentMapping("/ddo-test-none-" + uuid.uuid4().hex, 4096, writable=False)
    for bad in ("", "/", "/a/b", "/.."):
        with pytest.raises(DdoError, match="invalid shared-memory name"):
            shm.segment_path(bad)
    assert shm.segment_path("/ddo-0-ab-cd") == "/dev/shm/ddo-0-ab-cd"


def test_formatting():
    assert progress.format_bytes(4 << 30) == "4.00 GiB"
    assert progress.format_bytes(3 << 20) == "3.00 MiB"
    assert progress.format_bytes(512) == "512 B"
    assert progress.format_rate(3.49e9, 1.0) == "3.49 GB/s"
    assert progress.format_rate(1, 0) == "-- GB/s"


def test_reporter_summary_line():
    lines = []
    reporter = progress.ProgressReporter("KEY", progress=None, log=lines.append, min_bytes=1 << 40)
    reporter.start(4 << 30)
    assert not reporter.enabled and reporter.bar is None  # auto, below the threshold
    reporter.finish("registered", seconds=1.23)
    assert lines == ["ddo: registered 'KEY': 4.00 GiB in 1.23 s (3.49 GB/s)"]
    with pytest.raises(ValueError, match="progress="):
        progress.ProgressReporter("KEY", progress="yes")
