"""The component store against the real ddod: upload, attach from several processes, leases,
budgets, eviction, content hashes, progress."""

import os
import re
import signal
import sys
import threading
import time

import grpc
import pytest
import torch
import xxhash

from diffusers_dynamic_offloader import (
    ConfigurationError,
    DaemonError,
    DdoClient,
    TensorTableError,
)
from diffusers_dynamic_offloader._proto import components_pb2, sessions_pb2, stats_pb2
from store_support import (
    Child,
    child_env,
    deterministic_state_dict,
    digests,
    mappings_of,
    pool_files,
    pool_prefix,
    raw_bytes,
    segment_file,
    sizes_mentioned,
    total_bytes,
)
from support import ddo_stub, wait_until

MIB = 1 << 20
SEGMENT_GRANULARITY = 2 * MIB

UPLOAD_SCRIPT = """
import json, os, sys
from diffusers_dynamic_offloader import DdoClient
from store_support import deterministic_state_dict
key, seed = sys.argv[1], int(sys.argv[2])
with DdoClient.connect(timeout=10) as client:
    component = client.register_state_dict(key, deterministic_state_dict(seed))
    print(json.dumps({"warm_hit": component.warm_hit, "total_bytes": component.total_bytes,
                      "state": component.state}), flush=True)
"""

ATTACH_SCRIPT = """
import json, os, sys
from diffusers_dynamic_offloader import DdoClient
from store_support import digests
with DdoClient.connect(timeout=10) as client:
    with client.attach(sys.argv[1]) as attached:
        segments = [s.shm_name for s in attached.component.info.segments]
        print(json.dumps({"pid": os.getpid(), "digests": digests(attached.tensors),
                          "segments": segments}), flush=True)
        sys.stdin.readline()  # stay attached until the parent has looked
    print(json.dumps({"closed": True}), flush=True)
"""

# Registers through the real client, but stops after writing `stop_after` tensors: reports the
# segment, then waits for a line on stdin (or for SIGKILL) before writing the rest.
# Uploads the state dict of a seed and pauses (reading a line) after the Nth write: of a piece
# into the upload segment (DDO_UPLOAD_STREAMS=0), or of a tensor into a stream.
PAUSED_UPLOAD_SCRIPT = """
import json, os, sys
import threading
import diffusers_dynamic_offloader.segment_writer as segment_writer
import diffusers_dynamic_offloader.stream_writer as stream_writer
from diffusers_dynamic_offloader import DdoClient
from store_support import deterministic_state_dict
key, seed, stop_after = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
written = [0]
lock = threading.Lock()
def pause_at_the_nth(report):
    with lock:
        written[0] += 1
        if written[0] == stop_after:
            print(json.dumps(dict(report, pid=os.getpid())), flush=True)
            sys.stdin.readline()
original_write = segment_writer.SegmentWriter.write
def write(self, segment, offset, data, on_bytes):
    original_write(self, segment, offset, data, on_bytes)
    pause_at_the_nth({"segment": self._names[segment], "size": self._sizes[segment]})
segment_writer.SegmentWriter.write = write
original_send = stream_writer._send
def send(fd, tensor, on_bytes):
    original_send(fd, tensor, on_bytes)
    pause_at_the_nth({"stream": True})
stream_writer._send = send
with DdoClient.connect(timeout=10) as client:
    component = client.register_state_dict(key, deterministic_state_dict(seed))
    print(json.dumps({"warm_hit": component.warm_hit}), flush=True)
"""

#: How an upload is written: through a segment (copied at commit), or through streams.
UPLOAD_ROUTES = {"segment": "0", "streams": "2"}

WRITE_ATTACHED_SCRIPT = """
import json, sys
from diffusers_dynamic_offloader import DdoClient
with DdoClient.connect(timeout=10) as client:
    attached = client.attach(sys.argv[1])
    tensor = attached.tensors[sys.argv[2]]
    print(json.dumps({"attached": True}), flush=True)
    tensor.view(-1)[0] = 42.0  # copy-on-write: the page becomes this process's own
    again = client.attach(sys.argv[1]).tensors[sys.argv[2]]
    print(json.dumps({"wrote": float(tensor.view(-1)[0]),
                      "fresh_attach_reads": float(again.view(-1)[0])}), flush=True)
"""


def pool_stats(client: DdoClient) -> stats_pb2.PoolStats:
    return client.stats().pool


def rpc_ok(client: DdoClient, method: str) -> int:
    return sum(count.ok for count in client.stats().rpcs if count.method == method)


def keys(client: DdoClient) -> dict:
    return {component.cache_key: component.state for component in client.components()}


def expect_daemon_error(code: grpc.StatusCode, function, *args, **kwargs) -> DaemonError:
    with pytest.raises(DaemonError) as raised:
        function(*args, **kwargs)
    assert raised.value.code == code, str(raised.value)
    return raised.value


def footprint(size: int) -> int:
    return -(-size // SEGMENT_GRANULARITY) * SEGMENT_GRANULARITY


# One copy, many processes.


def test_upload_in_one_process_attach_from_two_at_once(daemon, client):
    original = deterministic_state_dict(7)
    expected = digests(original)
    uploader = Child(UPLOAD_SCRIPT, child_env(daemon.address), "shared", "7")
    try:
        report = uploader.read()
        assert uploader.finish() == 0, uploader.stderr()
    finally:
        uploader.close()
    assert report == {"warm_hit": False, "total_bytes": total_bytes(original), "state": "READY"}

    # The uploader is gone; the component stays.
    info = client.component("shared", with_layout=True).info
    assert len(info.segments) == 1
    segment = info.segments[0]
    path = segment_file(segment.shm_name)
    assert os.path.isfile(path)
    pool = pool_stats(client)
    assert pool.reserved_bytes == segment.size_bytes == footprint(segment.size_bytes)
    assert pool.segments == 1 and pool.components == 1
    # What READY components map (issue 31, finding 6), not their unaligned tensor bytes.
    assert pool.used_bytes == segment.size_bytes >= total_bytes(original)
    files_before = pool_files(pool_prefix(segment.shm_name))
    blocks_before = os.stat(path).st_blocks

    readers = [Child(ATTACH_SCRIPT, child_env(daemon.address), "shared") for _ in range(2)]
    try:
        reports = [reader.read() for reader in readers]  # both attached at the same time
        for reader, report in zip(readers, reports):
            assert report["digests"] == expected  # bitwise equal, dtypes and shapes too
            assert report["segments"] == [segment.shm_name]
            maps = mappings_of(reader.pid, path)
            assert maps, f"{path} is not mapped by pid {reader.pid}"
            for mapping in maps:
                assert mapping["perms"] == "rw-p", mapping  # copy-on-write
                assert mapping.get("Private_Dirty", 0) == 0, mapping  # nothing was copied
            # Both readers touched every byte: those pages are shared, not private copies.
            shared_kib = sum(m.get("Shared_Clean", 0) + m.get("Shared_Dirty", 0) for m in maps)
            assert shared_kib * 1024 >= total_bytes(original) - 64 * 1024, maps
        assert client.component("shared").sessions == 2
        assert client.stats().sessions == 2
        # Still one copy: no new segment, no growth of the one there is.
        assert pool_files(pool_prefix(segment.shm_name)) == files_before == [path]
        assert os.stat(path).st_blocks == blocks_before
        assert pool_stats(client).reserved_bytes == segment.size_bytes
        for reader in readers:
            reader.send()
            assert reader.read() == {"closed": True}
            assert reader.finish() == 0, reader.stderr()
    finally:
        for reader in readers:
            reader.close()
    assert wait_until(lambda: client.component("shared").sessions == 0, 2)


def test_register_then_attach_in_process(client):
    original = deterministic_state_dict(1)
    component = client.register_state_dict("one", original)
    assert component.ready and not component.warm_hit
    assert component.cache_key == "one"
    assert component.total_bytes == total_bytes(original)
    assert component.tensor_count == len(original)
    assert component.unit_count == len(original)
    assert re.fullmatch(r"xxh3-64:[0-9a-f]{16}", component.structure_hash)
    assert re.fullmatch(r"[0-9a-f]{16}", component.component_id)
    assert component.content_hash == ""
    with client.attach("one") as attached:
        assert list(attached.tensors) == list(original)
        assert digests(attached.tensors) == digests(original)
        assert digests(attached.state_dict()) == digests(original)
        assert attached.component.sessions == 1
        specs = {spec.name: spec for spec in attached.component.info.tensors}
        assert specs["blocks.0.attn.to_q.weight"].module_path == "blocks.0.attn.to_q"
        assert specs["scale"].module_path == ""
        assert [spec.unit for spec in attached.component.info.tensors] == list(range(len(original)))
    assert attached.closed
    with pytest.raises(Exception, match="closed"):
        attached.tensors


def test_tensors_outlive_close_safely(client):
    original = deterministic_state_dict(2)
    client.register_state_dict("outlive", original)
    attached = client.attach("outlive")
    kept = attached.tensors["blocks.1.mlp.weight"]
    attached.close()
    assert client.component("outlive").sessions == 0
    assert digests({"t": kept}) == digests({"t": original["blocks.1.mlp.weight"]})


def test_second_register_is_a_warm_hit(client):
    original = deterministic_state_dict(3)
    first = client.register_state_dict("warm", original)
    lines = []
    second = client.register_state_dict("warm", deterministic_state_dict(3), log=lines.append)
    assert not first.warm_hit and second.warm_hit
    assert second.structure_hash == first.structure_hash
    assert second.component_id == first.component_id
    assert rpc_ok(client, "CommitUpload") == 1  # nothing was uploaded the second time
    size = f"{total_bytes(original) / MIB:.2f} MiB"
    assert lines == [f"ddo: 'warm' is already in the pool ({size}): nothing to upload"]
    assert pool_stats(client).segments == 1


def test_tensor_table_metadata_and_units(client):
    original = deterministic_state_dict(4)
    component = client.register_state_dict("by-module", original, units="module")
    modules = []
    for name in original:
        path = name.rpartition(".")[0]
        if path not in modules:
            modules.append(path)
    assert component.unit_count == len(modules)
    units = {name: 5 for name in original}
    units["mask"] = 9
    assert client.register_state_dict("explicit", original, units=units).unit_count == 2
    with pytest.raises(TensorTableError, match="'mask'"):
        client.register_state_dict("partial", original, units={"scale": 0})
    with pytest.raises(ConfigurationError, match="units="):
        client.register_state_dict("bad", original, units="layer")


def test_client_side_table_errors(client):
    with pytest.raises(TensorTableError, match="'z'.*complex"):
        client.register_state_dict(
            "c", {"a": torch.zeros(2), "z": torch.zeros(2, dtype=torch.cfloat)}
        )
    with pytest.raises(TensorTableError, match="'n'.*not a torch.Tensor"):
        client.register_state_dict("c", {"n": [1, 2, 3]})
    with pytest.raises(TensorTableError, match="no tensors"):
        client.register_state_dict("c", {})
    with pytest.raises(TensorTableError, match="meta"):
        client.register_state_dict("c", {"m": torch.empty(4, device="meta")})
    with pytest.raises(ConfigurationError, match="cache_key"):
        client.register_state_dict("", {"a": torch.zeros(2)})
    assert keys(client) == {}


# The daemon's checks of the tensor table and the lease.


def spec(name="w", dtype=components_pb2.DTYPE_F32, shape=(4,), byte_size=16):
    return components_pb2.TensorSpec(name=name, dtype=dtype, shape=list(shape), byte_size=byte_size)


@pytest.mark.parametrize(
    "case, key, tensors, named",
    [
        ("duplicate names", "k", [spec("dup.weight"), spec("dup.weight")], "dup.weight"),
        ("byte size mismatch", "k", [spec("odd.weight", byte_size=15)], "odd.weight"),
        (
            "unspecified dtype",
            "k",
            [spec("untyped.weight", dtype=components_pb2.DTYPE_UNSPECIFIED)],
            "untyped.weight",
        ),
        ("empty key", "", [spec()], None),
        ("empty table", "k", [], None),
    ],
)
def test_daemon_rejects_an_invalid_table(daemon, client, case, key, tensors, named):
    request = components_pb2.RegisterComponentRequest(
        lease_id=client.lease_id, cache_key=key, tensors=tensors
    )
    with ddo_stub(daemon.address) as stub:
        with pytest.raises(grpc.RpcError) as raised:
            list(stub.RegisterComponent(request, timeout=5))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, raised.value.details()
    if named:
        assert named in raised.value.details()
    assert client.info().pid == daemon.proc.pid
    assert pool_stats(client).reserved_bytes == 0


def test_unknown_lease_is_refused(daemon, client):
    unknown = "0" * 32
    with ddo_stub(daemon.address) as stub:
        register = components_pb2.RegisterComponentRequest(
            lease_id=unknown, cache_key="k", tensors=[spec()]
        )
        attach = sessions_pb2.AttachRequest(lease_id=unknown, cache_key="k")
        for rpc, request in (("RegisterComponent", register), ("Attach", attach)):
            with pytest.raises(grpc.RpcError) as raised:
                answer = getattr(stub, rpc)(request, timeout=5)
                if isinstance(answer, grpc.Call):  # RegisterComponent streams its progress
                    list(answer)
            details = raised.value.details()
            assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION, (rpc, details)
        call = stub.LoadSafetensors(
            components_pb2.LoadSafetensorsRequest(lease_id=unknown, cache_key="k", files=["/x"]),
            timeout=5,
        )
        with pytest.raises(grpc.RpcError) as raised:
            list(call)
        assert raised.value.code() == grpc.StatusCode.FAILED_PRECONDITION, raised.value.details()


def test_get_evict_and_errors(client):
    expect_daemon_error(grpc.StatusCode.NOT_FOUND, client.component, "nothing")
    expect_daemon_error(grpc.StatusCode.NOT_FOUND, client.evict, "nothing")
    expect_daemon_error(grpc.StatusCode.NOT_FOUND, client.attach, "nothing")
    original = deterministic_state_dict(5)
    client.register_state_dict("evictable", original)
    segment = client.component("evictable", with_layout=True).info.segments[0]
    with client.attach("evictable"):
        expect_daemon_error(grpc.StatusCode.FAILED_PRECONDITION, client.evict, "evictable")
    assert client.evict("evictable") in (segment.size_bytes, total_bytes(original))
    expect_daemon_error(grpc.StatusCode.NOT_FOUND, client.component, "evictable")
    assert pool_stats(client).reserved_bytes == 0
    assert wait_until(lambda: not os.path.exists(segment_file(segment.shm_name)), 2)


# Leases: uploads die with their client.


@pytest.mark.parametrize("route", UPLOAD_ROUTES)
def test_killed_uploader_releases_its_upload(daemon, client, route):
    env = child_env(daemon.address, DDO_UPLOAD_STREAMS=UPLOAD_ROUTES[route])
    uploader = Child(PAUSED_UPLOAD_SCRIPT, env, "killed", "8", "7")
    path = None
    try:
        report = uploader.read()
        reserved = pool_stats(client).reserved_bytes
        if route == "segment":
            path = segment_file(report["segment"])
            assert os.path.isfile(path)
            assert reserved == report["size"] > 0
        else:  # the client never learns the segment of a streamed upload
            assert "segment" not in report and reserved > 0
        assert keys(client) == {"killed": "UPLOADING"}
        expect_daemon_error(grpc.StatusCode.NOT_FOUND, client.component, "killed")
        uploader.proc.send_signal(signal.SIGKILL)
        uploader.proc.wait()
    finally:
        uploader.close()
    assert wait_until(lambda: pool_stats(client).reserved_bytes == 0, 2), pool_stats(client)
    assert path is None or wait_until(lambda: not os.path.exists(path), 2), f"{path} is still there"
    expect_daemon_error(grpc.StatusCode.NOT_FOUND, client.component, "killed")
    assert keys(client) == {}
    assert pool_stats(client).segments == 0


def test_failed_write_aborts_the_upload(client, monkeypatch):
    import diffusers_dynamic_offloader.segment_writer as segment_writer

    def broken_write(self, segment, offset, data, on_bytes):
        raise RuntimeError("simulated failure while writing")

    monkeypatch.setenv("DDO_UPLOAD_STREAMS", "0")
    monkeypatch.setattr(segment_writer.SegmentWriter, "write", broken_write)
    with pytest.raises(RuntimeError, match="simulated"):
        client.register_state_dict("aborted", deterministic_state_dict(9))
    assert keys(client) == {}
    assert pool_stats(client).reserved_bytes == 0
    assert rpc_ok(client, "AbortUpload") == 1


def test_a_failed_stream_write_aborts_the_upload_with_the_writers_error(client, monkeypatch):
    import diffusers_dynamic_offloader.stream_writer as stream_writer

    original_send = stream_writer._send
    sent = []

    def broken_send(fd, tensor, on_bytes):
        if sent:  # the second tensor of any stream fails: the others stream on meanwhile
            raise RuntimeError("simulated failure while streaming")
        sent.append(tensor)
        original_send(fd, tensor, on_bytes)

    monkeypatch.setenv("DDO_UPLOAD_STREAMS", "2")
    monkeypatch.setattr(stream_writer, "_send", broken_send)
    with pytest.raises(RuntimeError, match="simulated"):
        client.register_state_dict("aborted", deterministic_state_dict(9))
    assert keys(client) == {}
    assert wait_until(lambda: pool_stats(client).reserved_bytes == 0, 2), pool_stats(client)
    # The pool keeps working: the same key uploads whole afterwards.
    monkeypatch.setattr(stream_writer, "_send", original_send)
    component = client.register_state_dict("aborted", deterministic_state_dict(9))
    assert not component.warm_hit
    with client.attach("aborted") as attached:
        for name, tensor in deterministic_state_dict(9).items():
            assert torch.equal(attached.tensors[name], tensor), name


@pytest.mark.parametrize("route", UPLOAD_ROUTES)
def test_register_waits_for_a_concurrent_upload(daemon, client, route):
    env = child_env(daemon.address, DDO_UPLOAD_STREAMS=UPLOAD_ROUTES[route])
    uploader = Child(PAUSED_UPLOAD_SCRIPT, env, "contended", "10", "3")
    try:
        report = uploader.read()
        # A short wait gives up with ABORTED, naming the uploader.
        started = time.monotonic()
        error = expect_daemon_error(
            grpc.StatusCode.ABORTED,
            client.register_state_dict,
            "contended",
            deterministic_state_dict(10),
            wait=0.5,
        )
        assert 0.4 < time.monotonic() - started < 3
        assert f"pid {report['pid']}" in error.details
        # A longer wait retries until the upload is committed, then it is a warm hit.
        results = []
        waiter = threading.Thread(
            target=lambda: results.append(
                client.register_state_dict("contended", deterministic_state_dict(10), wait=20)
            )
        )
        waiter.start()
        time.sleep(0.5)
        assert waiter.is_alive() and not results
        uploader.send()
        assert uploader.read() == {"warm_hit": False}
        waiter.join(10)
        assert results and results[0].warm_hit
        assert uploader.finish() == 0, uploader.stderr()
    finally:
        uploader.close()
    with client.attach("contended") as attached:
        assert digests(attached.tensors) == digests(deterministic_state_dict(10))


# Copy-on-write mapping.


def test_writing_to_an_attached_tensor_stays_in_the_writer(daemon, client):
    original = deterministic_state_dict(11)
    client.register_state_dict("readonly", original)
    name = "blocks.0.attn.to_q.bias"
    writer = Child(WRITE_ATTACHED_SCRIPT, child_env(daemon.address), "readonly", name)
    try:
        assert writer.read() == {"attached": True}
        assert writer.read() == {"wrote": 42.0,
                                 "fresh_attach_reads": float(original[name].view(-1)[0])}
        assert writer.finish() == 0, writer.stderr()  # no SIGSEGV: the write was private
    finally:
        writer.close()
    with client.attach("readonly") as attached:
        assert digests(attached.tensors) == digests(original)  # nothing changed
    assert wait_until(lambda: client.component("readonly").sessions == 0, 2)


# Budget and eviction.


def test_budget_exceeded(daemon_factory, short_dir):
    daemon = daemon_factory(os.path.join(short_dir, "b.sock"), "--ram-budget-gb", "0.01")
    big = {"big.weight": torch.zeros(4, 1 << 20)}  # 16 MiB
    with DdoClient.connect(daemon.address, timeout=10) as client:
        budget = pool_stats(client).budget_bytes
        assert abs(budget - 0.01 * (1 << 30)) <= 1
        error = expect_daemon_error(
            grpc.StatusCode.RESOURCE_EXHAUSTED, client.register_state_dict, "big", big
        )
        assert sizes_mentioned(error.details, [16 * MIB]), error.details
        assert sizes_mentioned(error.details, [budget]), error.details
        assert keys(client) == {} and pool_stats(client).reserved_bytes == 0
        # Nothing leaked: what fits still goes in.
        assert client.register_state_dict("small", {"w": torch.ones(1 << 20)}).ready


def three_mib(seed: int) -> dict:
    return {"w": torch.full((768 * 1024,), float(seed))}  # 3 MiB: a 4 MiB segment


def test_lru_eviction(daemon_factory, short_dir):
    # 10.24 MiB: two 4 MiB segments fit, three do not. No spill files: an upload that has
    # none is evicted (test_spill_uploads.py: with them it goes to its file).
    daemon = daemon_factory(os.path.join(short_dir, "lru.sock"), "--ram-budget-gb", "0.01",
                            "--spill-budget-gb", "0")
    with DdoClient.connect(daemon.address, timeout=10) as client:
        client.register_state_dict("A", three_mib(1))
        client.register_state_dict("B", three_mib(2))
        b_segment = segment_file(client.component("B", with_layout=True).info.segments[0].shm_name)
        time.sleep(0.01)
        client.attach("A").close()  # A is now the most recently used
        client.register_state_dict("C", three_mib(3))
        expect_daemon_error(grpc.StatusCode.NOT_FOUND, client.component, "B")
        assert set(keys(client)) == {"A", "C"}
        assert pool_stats(client).evictions == 1
        assert wait_until(lambda: not os.path.exists(b_segment), 2)
        # A component with a session is never evicted: with A and C held, D cannot fit.
        c = client.attach("C")
        time.sleep(0.01)
        a = client.attach("A")
        assert torch.equal(a.tensors["w"], three_mib(1)["w"])
        expect_daemon_error(
            grpc.StatusCode.RESOURCE_EXHAUSTED, client.register_state_dict, "D", three_mib(4)
        )
        assert set(keys(client)) == {"A", "C"}
        assert pool_stats(client).evictions == 1
        c.close()
        time.sleep(0.01)
        a.close()
        # A was attached and detached after C: C is the least recently used, and D evicts it.
        client.register_state_dict("D", three_mib(4))
        assert set(keys(client)) == {"A", "D"}
        assert pool_stats(client).evictions == 2


def test_a_warm_hit_counts_as_a_use(daemon_factory, short_dir):
    daemon = daemon_factory(os.path.join(short_dir, "w.sock"), "--ram-budget-gb", "0.01",
                            "--spill-budget-gb", "0")  # uploads are evicted, not spilled
    with DdoClient.connect(daemon.address, timeout=10) as client:
        client.register_state_dict("A", three_mib(1))
        client.register_state_dict("B", three_mib(2))
        time.sleep(0.01)
        assert client.register_state_dict("A", three_mib(1)).warm_hit  # bumps A
        client.register_state_dict("C", three_mib(3))
        assert set(keys(client)) == {"A", "C"}
        assert pool_stats(client).evictions == 1


# Content hashes.


def expected_hash(tensors) -> str:
    state = xxhash.xxh3_64(seed=0)
    for tensor in tensors.values():
        state.update(raw_bytes(tensor))
    return f"xxh3-64:{state.intdigest():016x}"


def test_content_hash(client):
    original = deterministic_state_dict(12)
    component = client.register_state_dict("hashed", original, content_hash=True)
    assert component.content_hash == expected_hash(original)
    again = client.register_state_dict("hashed", original, content_hash=True)
    assert again.warm_hit and again.content_hash == component.content_hash

    segments_before = pool_stats(client).segments
    segment_size = client.component("hashed", with_layout=True).info.segments[0].size_bytes
    error = expect_daemon_error(
        grpc.StatusCode.INVALID_ARGUMENT,
        client.register_state_dict,
        "wrong",
        original,
        content_hash="xxh3-64:0123456789abcdef",
    )
    assert error.rpc == "CommitUpload"
    expect_daemon_error(grpc.StatusCode.NOT_FOUND, client.component, "wrong")
    expect_daemon_error(grpc.StatusCode.NOT_FOUND, client.attach, "wrong")
    assert "wrong" not in keys(client)
    assert pool_stats(client).segments == segments_before
    assert pool_stats(client).reserved_bytes == segment_size

    with pytest.raises(ConfigurationError, match="xxh3-64"):
        client.register_state_dict("bad", original, content_hash="md5:00")


def test_same_structure_new_content_replaces_unless_in_use(client):
    first, second, third = (deterministic_state_dict(seed) for seed in (13, 14, 15))
    a = client.register_state_dict("model", first, content_hash=True)
    b = client.register_state_dict("model", second, content_hash=True)
    assert not b.warm_hit and b.content_hash != a.content_hash
    assert b.structure_hash == a.structure_hash
    assert pool_stats(client).components == 1
    with client.attach("model") as attached:
        assert digests(attached.tensors) == digests(second)
        expect_daemon_error(
            grpc.StatusCode.FAILED_PRECONDITION,
            client.register_state_dict,
            "model",
            third,
            content_hash=True,
        )
        # Another structure is refused too while in use.
        expect_daemon_error(
            grpc.StatusCode.FAILED_PRECONDITION,
            client.register_state_dict,
            "model",
            {"other": torch.zeros(3)},
        )
        assert digests(attached.tensors) == digests(second)
    other = client.register_state_dict("model", {"other": torch.zeros(3)})
    assert not other.warm_hit and other.structure_hash != a.structure_hash
    assert pool_stats(client).components == 1


# Progress.

SUMMARY = re.compile(
    r"ddo: registered 'progress': \d+\.\d\d MiB in \d+\.\d\d s \(\d+\.\d\d GB/s\)"
)


def test_progress_bar_and_summary(client, capsys):
    original = deterministic_state_dict(16)
    client.register_state_dict("progress", original, progress=True)
    err = capsys.readouterr().err
    assert "ddo progress:" in err and "%|" in err, err  # the tqdm bar, in bytes
    assert SUMMARY.search(err), err
    assert f"registered 'progress': {total_bytes(original) / MIB:.2f} MiB in " in err
    # A warm hit moves nothing: no bar, one line.
    client.register_state_dict("progress", original, progress=True)
    err = capsys.readouterr().err
    assert "%|" not in err, err
    assert err.strip() == (
        f"ddo: 'progress' is already in the pool ({total_bytes(original) / MIB:.2f} MiB): "
        "nothing to upload"
    )


def test_progress_auto_is_silent_for_small_transfers(client, capsys, monkeypatch):
    client.register_state_dict("quiet", deterministic_state_dict(17))
    assert capsys.readouterr().err == ""
    monkeypatch.setenv("DDO_PROGRESS_MIN_BYTES", "1024")  # the auto threshold is configurable
    client.register_state_dict("progress", deterministic_state_dict(18))
    err = capsys.readouterr().err
    assert "%|" in err and SUMMARY.search(err), err


def test_progress_false_and_log(client, capsys):
    client.register_state_dict("silent", deterministic_state_dict(19), progress=False)
    lines = []
    client.register_state_dict("progress", deterministic_state_dict(20), log=lines.append)
    assert capsys.readouterr().err == ""
    assert len(lines) == 1 and SUMMARY.fullmatch(lines[0]), lines


def test_progress_without_tqdm(client, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    client.register_state_dict("progress", deterministic_state_dict(21), progress=True)
    err = capsys.readouterr().err
    assert "%|" not in err
    assert SUMMARY.fullmatch(err.strip()), err
