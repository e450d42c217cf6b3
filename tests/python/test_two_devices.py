"""Several devices from one host copy (issue 7), on the host backend: a ddod started with
``--host-devices 2`` serves devices ``cpu`` and ``cpu:1``, each with its own copy worker and
budget, both streaming from the one pool segment of a component.

On a machine with two GPUs the same test runs with CUDA devices (tests/gpu/test_two_gpus.py).
"""

from __future__ import annotations

import os

import pytest
import torch

from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader._proto import sessions_pb2
from diffusers_dynamic_offloader.errors import DaemonError
from store_support import Child, child_env
from streaming_support import (CACHE_KEY, DEPTH, LINEARS_PER_BLOCK, RUNNER_SCRIPT, make_model)

LINEAR_UNITS = DEPTH * LINEARS_PER_BLOCK


@pytest.fixture
def two_device_daemon(daemon_factory, short_dir):
    return daemon_factory(os.path.join(short_dir, "run", "ddod.sock"), "--host-devices", "2")


def test_two_runners_on_two_devices_stream_one_host_copy(two_device_daemon):
    with DdoClient.connect(two_device_daemon.address, timeout=10) as client:
        stored = client.register_module(CACHE_KEY, make_model(torch.float32))
        env = child_env(two_device_daemon.address)
        children = [Child(RUNNER_SCRIPT, env, "float32", "until-told", "linear", device)
                    for device in ("cpu:0", "cpu:1")]
        try:
            opened = [child.read() for child in children]
            assert [message["device"] for message in opened] == ["cpu", "cpu:1"], opened
            assert all(child.read(60)["event"] == "streaming" for child in children)
            # Both sessions at once, one per device, on the same component.
            listed = client.rpc.unary("ListSessions", sessions_pb2.ListSessionsRequest()).sessions
            streaming = sorted(info.device_uuid for info in listed if info.device_uuid)
            assert streaming == ["cpu", "cpu:1"], listed
            for child in children:
                child.send("stop")
            results = [child.read(60) for child in children]
            for child, result in zip(children, results):
                # Each runner checked every forward bitwise against its unstreamed copy.
                assert result["event"] == "done", (result, child.stderr())
                forwards = result["forwards"]
                assert forwards >= 3
                stats = result["stats"]
                # Every use streamed, but the learning forward's when the runner was the
                # first to open a session (the second is given the schedule).
                assert stats["streamed_uses"] + stats["sync_uses"] == forwards * LINEAR_UNITS
                assert stats["streamed_uses"] >= (forwards - 1) * LINEAR_UNITS, stats
                assert child.finish() == 0, child.stderr()
        finally:
            for child in children:
                child.close()
        # One host copy: one component, its bytes counted once in the pool.
        pool = client.stats().pool
        assert pool.components == 1
        assert pool.used_bytes == pool.reserved_bytes >= stored.total_bytes


def test_a_device_the_daemon_does_not_serve_is_named_in_the_error(two_device_daemon):
    with DdoClient.connect(two_device_daemon.address, timeout=10) as client:
        model = make_model(torch.float32)
        client.register_module(CACHE_KEY, model)
        with pytest.raises(DaemonError, match=r"2 host device\(s\) \(cpu to cpu:1\), not 'cpu:2'"):
            client.stream(model, CACHE_KEY, device="cpu:2")


def test_one_host_device_by_default(daemon):
    with DdoClient.connect(daemon.address, timeout=10) as client:
        model = make_model(torch.float32)
        client.register_module(CACHE_KEY, model)
        with pytest.raises(DaemonError, match="--host-devices"):
            client.stream(model, CACHE_KEY, device="cpu:1")
