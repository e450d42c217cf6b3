"""Registering a component whose size takes ddod longer than any fixed deadline (issue 30,
item 1): RegisterComponent and CommitUpload answer at once and stream their progress, the
client bounds them by a stall watchdog, and a caller that hangs up leaves nothing behind."""

import gc
import os
import signal
import time

import grpc
import pytest
import torch
from torch import nn

from diffusers_dynamic_offloader import DdoClient, DdoError
from diffusers_dynamic_offloader._proto import components_pb2
from diffusers_dynamic_offloader.seed_compat.offload_api import enable_offload, remove_dynamic_offload
from support import ddo_stub, wait_until

GIB = 1 << 30


@pytest.fixture
def big_daemon(daemon_factory, short_dir):
    """A ddod whose pool takes 8 GiB whatever RAM is free when it starts (its default budget
    is a share of the free RAM, which other work on the machine varies)."""
    return daemon_factory(os.path.join(short_dir, "run", "ddod.sock"), "--ram-budget-gb", "8")


@pytest.fixture
def big_client(big_daemon):
    with DdoClient.connect(big_daemon.address, timeout=10) as connected:
        yield connected


def big_sequential(total_bytes: int, width: int = 4096) -> nn.Sequential:
    """An fp32 stack of bias-free width x width Linears of about ``total_bytes``, cheap to make
    (no random init of gigabytes): each layer a constant with a few random rows, so that a
    layer served with the wrong bytes changes the output."""
    layer_bytes = width * width * 4
    layers = []
    generator = torch.Generator().manual_seed(30)
    for index in range(max(1, total_bytes // layer_bytes)):
        layer = torch.nn.utils.skip_init(nn.Linear, width, width, bias=False)
        with torch.no_grad():
            layer.weight.fill_(1.0 / width)
            layer.weight[index % width].normal_(0, 0.02, generator=generator)
        layers.append(layer)
    return nn.Sequential(*layers).eval()


def table(key_bytes: int) -> list:
    return [components_pb2.TensorSpec(name="weight", dtype=components_pb2.DTYPE_U8,
                                      shape=[key_bytes], byte_size=key_bytes)]


def test_a_6_gib_module_offloads_through_enable_offload_with_the_default_timeout(big_daemon,
                                                                                capfd):
    # The seed runner's call. With RegisterComponent under the client's 5 s deadline this
    # failed with DEADLINE_EXCEEDED after 6.2 s on a 2-core machine.
    model = big_sequential(6 * GIB)
    sample = torch.randn(2, 4096, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = model(sample)
    with DdoClient.connect(big_daemon.address) as client:
        assert client.timeout == 5.0
        result = enable_offload(model, component="transformer", execution_device="cpu",
                                client=client, environ={})
        try:
            assert result.route == "dynamic_offload"
            with torch.no_grad():
                got = model(sample)
            assert torch.equal(got, expected)
        finally:
            remove_dynamic_offload(result)
    del model, result
    gc.collect()  # the next test's ddod sizes its pool by the RAM free when it starts
    err = capfd.readouterr().err
    # The seed API shows a progress bar for the registration, its stages named (a streamed
    # upload's writing is ddod's reading of its streams).
    assert "(reserving)" in err and ("(writing)" in err or "(streaming)" in err), err[-2000:]
    assert "ddo: registered" in err, err[-2000:]


def test_register_answers_at_once_and_ends_with_the_upload(big_daemon, big_client):
    daemon, client = big_daemon, big_client
    size = 2 * GIB
    request = components_pb2.RegisterComponentRequest(
        lease_id=client.lease_id, cache_key="progress", tensors=table(size))
    with ddo_stub(daemon.address) as stub:
        messages = list(stub.RegisterComponent(request, timeout=120))
        assert len(messages) >= 2
        first, last = messages[0], messages[-1]
        assert not first.done and first.bytes_done <= size  # at once, before the work
        assert [m.done for m in messages].count(True) == 1 and last.done
        assert last.bytes_total >= size and last.bytes_done == last.bytes_total
        done = [m.bytes_done for m in messages]
        assert done == sorted(done), "progress never goes back"
        assert last.result.upload_id and not last.result.warm_hit
        assert [p.name for p in last.result.placements] == ["weight"]
        commits = list(stub.CommitUpload(components_pb2.CommitUploadRequest(
            lease_id=client.lease_id, upload_id=last.result.upload_id), timeout=120))
    assert commits[-1].done and not any(m.done for m in commits[:-1])
    assert commits[-1].component.ref.cache_key == "progress"
    assert commits[-1].component.state == components_pb2.COMPONENT_STATE_READY


def test_a_caller_that_hangs_up_while_ddod_reserves_leaves_no_upload(big_daemon, big_client):
    daemon, client = big_daemon, big_client
    request = components_pb2.RegisterComponentRequest(
        lease_id=client.lease_id, cache_key="abandoned", tensors=table(6 * GIB))
    with ddo_stub(daemon.address) as stub:
        call = stub.RegisterComponent(request)
        first = next(call)
        assert not first.done
        call.cancel()
    # The reservation stops (or is undone) and the key stays free (the placeholder goes once
    # the allocation it waited for, e.g. behind the pre-faulted reserve's yield, is undone).
    assert wait_until(lambda: client.stats().pool.reserved_bytes == 0 and not any(
        c.cache_key == "abandoned" for c in client.components()), timeout=30), \
        client.stats().pool
    again = client.register_state_dict("abandoned", {"w": torch.ones(4)}, progress=False)
    assert not again.warm_hit


def test_a_stopped_ddod_is_given_up_on_after_the_stall_timeout(daemon):
    module = nn.Sequential(nn.Linear(64, 64))
    with DdoClient.connect(daemon.address) as client:
        os.kill(daemon.proc.pid, signal.SIGSTOP)
        try:
            started = time.monotonic()
            with pytest.raises(DdoError, match="no RegisterComponent progress for 1.5 s"):
                client.register_module("stalled", module, progress=False, stall_timeout=1.5)
            assert time.monotonic() - started < 30
        finally:
            os.kill(daemon.proc.pid, signal.SIGCONT)
        # ddod lives on, and the same registration works once it runs again.
        stored = client.register_module("stalled", module, progress=False)
        assert stored.total_bytes > 0


def test_a_refused_register_reads_as_before(daemon, client):
    request = components_pb2.RegisterComponentRequest(
        lease_id=client.lease_id, cache_key="", tensors=table(8))
    with ddo_stub(daemon.address) as stub:
        with pytest.raises(grpc.RpcError) as raised:
            list(stub.RegisterComponent(request, timeout=5))
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "cache_key" in raised.value.details()
