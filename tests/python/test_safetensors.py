"""LoadSafetensors against the real ddod: valid sharded folders load bitwise, malformed files
are refused with INVALID_ARGUMENT naming the file (and tensor), and ddod keeps serving."""

import json
import os
import re
from collections import OrderedDict

import grpc
import pytest
import torch
import xxhash

from diffusers_dynamic_offloader import DaemonError, DdoError
from diffusers_dynamic_offloader.errors import InputFileError
from store_support import (
    deterministic_state_dict,
    digests,
    raw_bytes,
    safetensors_header,
    total_bytes,
    write_index,
    write_raw_safetensors,
    write_safetensors,
)
from support import wait_until

SHARD_1 = "diffusion_pytorch_model-00001-of-00002.safetensors"
SHARD_2 = "diffusion_pytorch_model-00002-of-00002.safetensors"
INDEX = "diffusion_pytorch_model.safetensors.index.json"


def contiguous_state_dict(seed: int) -> "OrderedDict[str, torch.Tensor]":
    return OrderedDict(
        (name, tensor.contiguous()) for name, tensor in deterministic_state_dict(seed).items()
    )


def write_model_folder(folder: str, tensors) -> dict:
    """Two shards and an index, the way Diffusers saves a large model; returns the weight map."""
    os.makedirs(folder, exist_ok=True)
    names = list(tensors)
    first = OrderedDict((name, tensors[name]) for name in names[: len(names) // 2])
    second = OrderedDict((name, tensors[name]) for name in names[len(names) // 2 :])
    write_safetensors(os.path.join(folder, SHARD_1), first, metadata={"format": "pt"})
    write_safetensors(os.path.join(folder, SHARD_2), second, metadata={"format": "pt"})
    weight_map = {name: SHARD_1 for name in first}
    weight_map.update({name: SHARD_2 for name in second})
    write_index(os.path.join(folder, INDEX), weight_map, total_bytes(tensors))
    return weight_map


def test_sharded_folder_loads_bitwise(client, short_dir):
    original = contiguous_state_dict(30)
    folder = os.path.join(short_dir, "model", "transformer")
    write_model_folder(folder, original)
    lines = []
    component = client.load_safetensors("folder", folder, log=lines.append)
    assert component.ready and not component.warm_hit
    assert component.total_bytes == total_bytes(original)
    assert component.tensor_count == len(original)
    assert len(lines) == 1
    assert re.fullmatch(
        r"ddo: loaded 'folder': \d+\.\d\d MiB in \d+\.\d\d s \(\d+\.\d\d GB/s\)", lines[0]
    ), lines
    with client.attach("folder") as attached:
        assert set(attached.tensors) == set(original)
        assert digests(attached.tensors) == digests(original)
        for spec in attached.component.info.tensors:
            assert spec.module_path == spec.name.rpartition(".")[0]
            assert spec.module_class == ""
    again = client.load_safetensors("folder", folder, progress=False)
    assert again.warm_hit and again.structure_hash == component.structure_hash


def test_explicit_files_and_index(client, short_dir):
    original = contiguous_state_dict(31)
    folder = os.path.join(short_dir, "explicit")
    write_model_folder(folder, original)
    component = client.load_safetensors(
        "explicit",
        [os.path.join(folder, SHARD_1), os.path.join(folder, SHARD_2)],
        index_file=os.path.join(folder, INDEX),
    )
    assert component.ready
    with client.attach("explicit") as attached:
        assert digests(attached.tensors) == digests(original)


def test_single_file_with_progress(client, short_dir, capsys):
    original = contiguous_state_dict(32)
    path = write_safetensors(os.path.join(short_dir, "one.safetensors"), original)
    client.load_safetensors("single", path, progress=True)
    err = capsys.readouterr().err
    assert "ddo single:" in err and "%|" in err, err
    assert re.search(r"ddo: loaded 'single': \d+\.\d\d MiB in ", err), err
    with client.attach("single") as attached:
        assert digests(attached.tensors) == digests(original)


def test_load_with_the_content_hash(client, short_dir):
    original = contiguous_state_dict(34)
    folder = os.path.join(short_dir, "hashed")
    write_model_folder(folder, original)
    state = xxhash.xxh3_64(seed=0)
    for tensor in original.values():  # table order: the shards in order, then file offsets
        state.update(raw_bytes(tensor))
    expected = f"xxh3-64:{state.intdigest():016x}"
    component = client.load_safetensors("hashed", folder, content_hash=expected)
    assert component.ready and component.content_hash == expected
    assert client.component("hashed").content_hash == expected


def test_load_with_a_wrong_content_hash(client, short_dir):
    path = write_safetensors(os.path.join(short_dir, "h.safetensors"), contiguous_state_dict(33))
    with pytest.raises(DaemonError) as raised:
        client.load_safetensors("hashed", path, content_hash="xxh3-64:0123456789abcdef")
    assert raised.value.code == grpc.StatusCode.INVALID_ARGUMENT, str(raised.value)
    assert "hashed" not in {component.cache_key for component in client.components()}
    assert client.stats().pool.reserved_bytes == 0


def test_a_stalled_load_is_cancelled_and_leaves_nothing(client, short_dir):
    big = OrderedDict((f"layer.{i}.weight", torch.full((1 << 20,), float(i))) for i in range(16))
    path = write_safetensors(os.path.join(short_dir, "big.safetensors"), big)  # 64 MiB
    with pytest.raises(DdoError, match="no LoadSafetensors progress for 1e-06 s"):
        client.load_safetensors("stalled", path, stall_timeout=1e-6)
    assert wait_until(lambda: client.components() == [], 10), client.components()
    assert wait_until(lambda: client.stats().pool.reserved_bytes == 0, 10)
    # The key loads normally afterwards.
    assert client.load_safetensors("stalled", path).ready


def test_missing_file_is_not_found(client, short_dir):
    # The client opens the files itself (it passes descriptors): a missing one fails here.
    path = os.path.join(short_dir, "absent.safetensors")
    with pytest.raises(InputFileError, match="no such file") as raised:
        client.load_safetensors("absent", path)
    assert path in str(raised.value)
    assert client.info().version


# Malformed files. Each case writes its files and returns (files, index file or None, the
# names the message must contain, among which at least one of `any_of`).

TENSOR = torch.arange(6, dtype=torch.float32).reshape(2, 3)  # 24 bytes


def header_bytes(header: dict) -> bytes:
    return json.dumps(header).encode()


def case_header_length_too_large(d):
    path = write_raw_safetensors(
        os.path.join(d, "huge-header.safetensors"), b"{}", b"", declared_length=1 << 62
    )
    return [path], None, [path], []


def case_header_length_past_eof(d):
    header, data = safetensors_header({"layer.weight": TENSOR})
    raw = header_bytes(header)
    path = write_raw_safetensors(
        os.path.join(d, "past-eof.safetensors"), raw, data, declared_length=len(raw) + 4096
    )
    return [path], None, [path], []


def case_shorter_than_the_length_field(d):
    path = os.path.join(d, "stub.safetensors")
    with open(path, "wb") as file:
        file.write(b"\x10\x00\x00")
    return [path], None, [path], []


def case_bad_json(d):
    path = write_raw_safetensors(
        os.path.join(d, "bad-json.safetensors"), b'{"layer.weight": {"dtype": "F32", ', b"\0" * 24
    )
    return [path], None, [path], []


def case_unknown_dtype(d):
    header = {"layer.odd_type": {"dtype": "Q7", "shape": [2, 3], "data_offsets": [0, 24]}}
    path = write_raw_safetensors(
        os.path.join(d, "dtype.safetensors"), header_bytes(header), b"\0" * 24
    )
    return [path], None, [path, "layer.odd_type"], []


def case_shape_and_dtype_do_not_match_the_bytes(d):
    header = {"layer.short": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}}
    path = write_raw_safetensors(
        os.path.join(d, "shape.safetensors"), header_bytes(header), b"\0" * 20
    )
    return [path], None, [path, "layer.short"], []


def case_offsets_outside_the_file(d):
    header = {"layer.beyond": {"dtype": "F32", "shape": [2, 3], "data_offsets": [16, 40]}}
    path = write_raw_safetensors(
        os.path.join(d, "outside.safetensors"), header_bytes(header), b"\0" * 24
    )
    return [path], None, [path, "layer.beyond"], []


def case_reversed_offsets(d):
    header = {"layer.reversed": {"dtype": "F32", "shape": [0], "data_offsets": [24, 0]}}
    path = write_raw_safetensors(
        os.path.join(d, "reversed.safetensors"), header_bytes(header), b"\0" * 24
    )
    return [path], None, [path, "layer.reversed"], []


def case_overlapping_ranges(d):
    header = {
        "layer.alpha": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "layer.beta": {"dtype": "F32", "shape": [2, 3], "data_offsets": [16, 40]},
    }
    path = write_raw_safetensors(
        os.path.join(d, "overlap.safetensors"), header_bytes(header), b"\0" * 40
    )
    return [path], None, [path], ["layer.alpha", "layer.beta"]


def case_index_names_a_missing_shard(d):
    shard = write_safetensors(os.path.join(d, SHARD_1), {"present.weight": TENSOR})
    index = write_index(
        os.path.join(d, INDEX),
        {"present.weight": SHARD_1, "absent.weight": SHARD_2},
        48,
    )
    return [shard], index, [SHARD_2], []


def case_tensor_in_the_wrong_shard(d):
    first = write_safetensors(os.path.join(d, SHARD_1), {"first.weight": TENSOR})
    second = write_safetensors(os.path.join(d, SHARD_2), {"second.weight": TENSOR})
    index = write_index(
        os.path.join(d, INDEX), {"first.weight": SHARD_2, "second.weight": SHARD_1}, 48
    )
    return [first, second], index, [], ["first.weight", "second.weight"]


MALFORMED = [
    case_header_length_too_large,
    case_header_length_past_eof,
    case_shorter_than_the_length_field,
    case_bad_json,
    case_unknown_dtype,
    case_shape_and_dtype_do_not_match_the_bytes,
    case_offsets_outside_the_file,
    case_reversed_offsets,
    case_overlapping_ranges,
    case_index_names_a_missing_shard,
    case_tensor_in_the_wrong_shard,
]


@pytest.mark.parametrize("case", MALFORMED, ids=lambda case: case.__name__[len("case_") :])
def test_malformed_file_is_invalid_argument(daemon, client, short_dir, case):
    folder = os.path.join(short_dir, "files")
    os.mkdir(folder)
    files, index, required, any_of = case(folder)
    with pytest.raises(DaemonError) as raised:
        client.load_safetensors("malformed", files, index_file=index)
    error = raised.value
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT, str(error)
    for text in required:
        assert text in error.details, f"{text!r} not in {error.details!r}"
    if any_of:
        assert any(text in error.details for text in any_of), error.details
    if index is not None and not required:
        # The file is named: the index or one of the shards.
        assert any(os.path.basename(path) in error.details for path in files + [index])
    # ddod keeps serving, and nothing is left behind.
    assert daemon.proc.poll() is None
    assert client.info().pid == daemon.proc.pid
    assert client.components() == []
    assert client.stats().pool.reserved_bytes == 0
