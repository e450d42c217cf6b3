"""The client's side of streamed uploads (stream_writer.py), without ddod: what each stream
carries arrives whole and in order through real pipes, by reference (vmsplice) for the caller's
CPU tensors and by copy for temporaries; every descriptor is closed whatever happens; and
DDO_UPLOAD_STREAMS is read as documented."""

from __future__ import annotations

import os
import threading

import pytest
import torch

from diffusers_dynamic_offloader import stream_writer
from diffusers_dynamic_offloader.errors import ConfigurationError, DdoError
from diffusers_dynamic_offloader.hashing import tensor_bytes


def drain(fd: int, into: list) -> threading.Thread:
    """Reads ``fd`` to its end on a thread, appending the bytes to ``into``."""
    def run() -> None:
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(fd)
        into.append(b"".join(chunks))
    thread = threading.Thread(target=run)
    thread.start()
    return thread


def is_closed(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return True
    return False


def test_each_stream_arrives_whole_and_in_order():
    generator = torch.Generator().manual_seed(3)
    contiguous = torch.randn(1 << 20, generator=generator)  # 4 MiB: several pipe fills
    strided = torch.randn(64, 96, generator=generator).t()  # a temporary copy travels
    small = torch.arange(7, dtype=torch.int16)
    empty = torch.empty(0)
    streams = [[contiguous, small], [strided, empty, contiguous[3:11]]]
    pipes = [os.pipe() for _ in streams]
    received = [[] for _ in streams]
    readers = [drain(read, got) for (read, _), got in zip(pipes, received)]
    counted = []
    stream_writer.write_streams([write for _, write in pipes], streams, counted.append)
    for reader in readers:
        reader.join(30)
    for got, tensors in zip(received, streams):
        expected = b"".join(tensor_bytes(tensor).numpy().tobytes() for tensor in tensors)
        assert got == [expected]
    assert sum(counted) == sum(len(got[0]) for got in received)
    assert all(is_closed(write) for _, write in pipes)


def test_a_closed_reader_is_a_ddo_error_naming_the_stream_and_every_descriptor_closes():
    read, write = os.pipe()
    os.close(read)  # ddod gave up on the upload
    other_read, other_write = os.pipe()
    received = []
    reader = drain(other_read, received)
    with pytest.raises(DdoError, match="stream 0"):
        stream_writer.write_streams([write, other_write],
                                    [[torch.ones(1 << 16)], [torch.zeros(10)]])
    reader.join(30)
    assert is_closed(write) and is_closed(other_write)


def test_a_writers_own_failure_is_raised_before_the_broken_pipes_it_causes(monkeypatch):
    original = stream_writer._send

    def failing(fd, tensor, on_bytes):
        if tensor.numel() == 3:
            raise RuntimeError("the tensor could not be copied")
        original(fd, tensor, on_bytes)

    monkeypatch.setattr(stream_writer, "_send", failing)
    read, write = os.pipe()
    os.close(read)  # the other stream is broken too
    failing_read, failing_write = os.pipe()
    received = []
    reader = drain(failing_read, received)
    with pytest.raises(RuntimeError, match="could not be copied"):
        stream_writer.write_streams([write, failing_write],
                                    [[torch.ones(1 << 16)], [torch.zeros(3)]])
    reader.join(30)


def test_more_streams_than_pipes_closes_the_pipes_and_says_so():
    read, write = os.pipe()
    with pytest.raises(DdoError, match="2 streams of tensors for 1 pipes"):
        stream_writer.write_streams([write], [[], []])
    assert is_closed(write)
    os.close(read)


@pytest.mark.parametrize("value, expected", [("0", 0), ("1", 1), (" 16 ", 16)])
def test_ddo_upload_streams_sets_the_count(monkeypatch, value, expected):
    monkeypatch.setenv("DDO_UPLOAD_STREAMS", value)
    assert stream_writer.upload_streams() == expected


@pytest.mark.parametrize("value", ["17", "-1", "four", "2.5"])
def test_ddo_upload_streams_out_of_range_is_a_configuration_error(monkeypatch, value):
    monkeypatch.setenv("DDO_UPLOAD_STREAMS", value)
    with pytest.raises(ConfigurationError, match="DDO_UPLOAD_STREAMS"):
        stream_writer.upload_streams()


def test_the_default_is_the_cpus_up_to_eight(monkeypatch):
    monkeypatch.delenv("DDO_UPLOAD_STREAMS", raising=False)
    assert stream_writer.upload_streams() == max(1, min(os.cpu_count() or 1, 8))


@pytest.mark.skipif(stream_writer._VMSPLICE is None, reason="no vmsplice on this system")
def test_only_the_callers_own_cpu_memory_travels_by_reference(monkeypatch):
    routes = []
    splice, copy = stream_writer._splice_pages, stream_writer._write_copy
    monkeypatch.setattr(stream_writer, "_splice_pages",
                        lambda *args: (routes.append("reference"), splice(*args)))
    monkeypatch.setattr(stream_writer, "_write_copy",
                        lambda *args: (routes.append("copy"), copy(*args)))
    read, write = os.pipe()
    received = []
    reader = drain(read, received)
    stream_writer.write_streams([write], [[torch.ones(100), torch.ones(4, 6).t()]])
    reader.join(30)
    assert routes == ["reference", "copy"]
