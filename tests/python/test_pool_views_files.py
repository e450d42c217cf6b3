"""map_component over a component whose segments are backing files (SEGMENT_KIND_FILE, the
file tier): each file is mapped read-only through the opener's OPEN, and every tensor is viewed
at its offset in the file. No daemon: a small opener hands out os.open of the real file (ddod's
OPEN of a file grant is tested in daemon/identity/identity_server_test.cc)."""

import json
import os
import struct

import pytest
import torch

from diffusers_dynamic_offloader import DdoError, dtypes, shm
from diffusers_dynamic_offloader._proto import components_pb2
from diffusers_dynamic_offloader.pool_views import map_component


def write_safetensors(path, tensors):
    """Writes ``tensors`` (name -> contiguous CPU tensor) as a safetensors file; returns each
    tensor's (offset in the file, byte size)."""
    header, blobs, cursor = {}, [], 0
    for name, tensor in tensors.items():
        data = tensor.contiguous().view(torch.uint8).reshape(-1).numpy().tobytes()
        header[name] = {
            "dtype": dtypes.safetensors_name(dtypes.to_proto(tensor.dtype)),
            "shape": list(tensor.shape),
            "data_offsets": [cursor, cursor + len(data)],
        }
        blobs.append(data)
        cursor += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    start = 8 + len(text)
    return {name: (start + spec["data_offsets"][0], spec["data_offsets"][1] - spec["data_offsets"][0])
            for name, spec in header.items()}


def file_component(paths_and_tensors):
    """A ComponentInfo whose segments are the given files, as ddod describes a component on
    the file tier."""
    info = components_pb2.ComponentInfo()
    info.ref.cache_key = "test/file-tier"
    info.tier = components_pb2.COMPONENT_TIER_FILE
    for index, (path, tensors, offsets) in enumerate(paths_and_tensors):
        size = os.path.getsize(path)
        info.segments.add(shm_name=f"/ddo-file-test-{index}", size_bytes=size,
                          kind=components_pb2.SEGMENT_KIND_FILE, file_size=size)
        for name, tensor in tensors.items():
            offset, byte_size = offsets[name]
            info.tensors.add(name=name, dtype=dtypes.to_proto(tensor.dtype),
                             shape=list(tensor.shape), byte_size=byte_size)
            info.placements.add(name=name, segment=index, offset=offset, byte_size=byte_size)
    return info


class FileOpener(shm.SegmentOpener):
    """Serves each file segment name from a real file, read-only, as ddod's OPEN would."""

    def __init__(self, files):
        self.asked = []

        def ask(name, writable):
            self.asked.append((name, writable))
            return os.open(files[name], os.O_RDONLY | os.O_CLOEXEC)

        super().__init__(ask, daemon_uid=os.getuid())


@pytest.fixture
def two_files(tmp_path):
    generator = torch.Generator().manual_seed(33)
    first = {
        "blocks.0.weight": torch.randn(64, 48, generator=generator),
        "blocks.0.bias": torch.randn(48, generator=generator).to(torch.bfloat16),
        "scale": torch.tensor([3], dtype=torch.int64),
    }
    second = {"head.weight": torch.randn(5, 7, generator=generator).to(torch.float16)}
    entries = []
    for index, tensors in enumerate((first, second)):
        path = str(tmp_path / f"model-{index}.safetensors")
        entries.append((path, tensors, write_safetensors(path, tensors)))
    return entries


def test_file_segments_are_mapped_copy_on_write_and_viewed_at_their_file_offsets(two_files):
    info = file_component(two_files)
    opener = FileOpener({f"/ddo-file-test-{i}": path for i, (path, _, _) in enumerate(two_files)})
    mappings, views = map_component(info, opener)
    try:
        # Each file asked for once, read-only, through ddod's OPEN (never by a /dev/shm name).
        assert sorted(opener.asked) == [("/ddo-file-test-0", False), ("/ddo-file-test-1", False)]
        assert all(m.backing_file and not m.writable and m.copy_on_write for m in mappings)
        expected = {name: t for _, tensors, _ in two_files for name, t in tensors.items()}
        assert list(views) == list(expected)
        for name, tensor in expected.items():
            assert views[name].dtype == tensor.dtype
            assert torch.equal(views[name], tensor), name
        # The views are the file's pages, not copies: they see the file as it is now.
        path, tensors, offsets = two_files[1]
        offset, _ = offsets["head.weight"]
        with open(path, "r+b") as f:
            f.seek(offset)
            f.write(torch.full((1,), 2.5, dtype=torch.float16).view(torch.uint8).numpy().tobytes())
        assert views["head.weight"][0, 0].item() == 2.5
        # A runner that writes a weight changes its own copy of the page, never the file.
        views["head.weight"][0, 0] = 7.0
        assert views["head.weight"][0, 0].item() == 7.0
        with open(path, "rb") as f:
            f.seek(offset)
            assert f.read(2) == torch.full((1,), 2.5, dtype=torch.float16).view(
                torch.uint8).numpy().tobytes()
    finally:
        for mapping in mappings:
            mapping.close()


def test_a_file_shorter_than_its_segment_is_refused_and_nothing_stays_mapped(two_files):
    info = file_component(two_files)
    info.segments[1].size_bytes += 4096
    opener = FileOpener({f"/ddo-file-test-{i}": path for i, (path, _, _) in enumerate(two_files)})
    with pytest.raises(DdoError, match="holds .* bytes, but ddod said"):
        map_component(info, opener)


def test_a_file_segment_needs_ddod_and_is_never_writable(two_files):
    info = file_component(two_files[:1])
    with pytest.raises(DdoError, match="only ddod serves it"):
        map_component(info, shm.BY_NAME)
    with pytest.raises(DdoError, match="mapped read-only"):
        shm.SegmentMapping("/ddo-file-test-0", 4096, writable=True, backing_file=True)


def test_an_unknown_segment_kind_is_refused(two_files):
    info = file_component(two_files[:1])
    info.segments[0].kind = 7  # a kind from a newer ddod
    with pytest.raises(DdoError, match="kind 7, which this client does not know"):
        map_component(info, shm.BY_NAME)
