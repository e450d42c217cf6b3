"""Streaming sessions on ddod's host backend (device "cpu"): a module streams its Linear weights
through ddod's ring and computes exactly what it computes on its own.

Every test runs the real ddod; the model is a small synthetic transformer
(streaming_support.TinyTransformer) whose block Linears all stream (the small-tensor threshold
is 0). Outputs are compared bitwise with an untouched copy of the model.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch
from torch import nn

from diffusers_dynamic_offloader import DdoClient, DdoError, StreamingSession
from diffusers_dynamic_offloader._proto import sessions_pb2
from diffusers_dynamic_offloader.errors import DaemonGoneError
from store_support import Child, child_env
from streaming_support import (
    CACHE_KEY,
    CONSUMERS,
    DEPTH,
    LINEARS_PER_BLOCK,
    RUNNER_SCRIPT,
    STREAM_ALL,
    TinyTransformer,
    frozen_copy,
    make_model,
    mismatches,
    run,
    stats_summary,
    use_consumer,
)
from support import process_gone, wait_until

LINEAR_UNITS = DEPTH * LINEARS_PER_BLOCK


@pytest.fixture(autouse=True, params=CONSUMERS)
def consumer(request, monkeypatch) -> str:
    """Every test of this file runs on the Python consumer and on the C++ one."""
    use_consumer(monkeypatch, request.param)
    return request.param


def sessions(client: DdoClient):
    """ddod's ListSessions by session id prefix (ddod shows the first 8 hex digits only: a
    session id is a capability)."""
    listed = client.rpc.unary("ListSessions", sessions_pb2.ListSessionsRequest()).sessions
    return {info.session_id: info for info in listed}


def listed(client: DdoClient, session_id: str) -> bool:
    return session_id[:8] in sessions(client)


def open_session(client, model, unit="linear", slots=None, **extra) -> StreamingSession:
    settings = dict(STREAM_ALL, DDO_STREAM_UNIT=unit, **extra)
    if slots is not None:
        settings["DDO_RING_SLOTS"] = str(slots)
    session = client.stream(model, CACHE_KEY, device="cpu", settings=settings)
    expected = os.environ["DDO_CLIENT_CONSUMER"] if session.stats()["units"] else "none"
    assert session.stats()["consumer"] == expected
    return session


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["f32", "bf16"])
@pytest.mark.parametrize(
    "unit,slots", [("linear", 2), ("linear", 4), ("block", 2), ("block", 3)],
    ids=["linear-K2", "linear-K4", "block-K2", "block-K3"],
)
def test_streamed_forwards_are_bitwise_equal_over_many_ring_cycles(client, dtype, unit, slots):
    model = make_model(dtype)
    reference = frozen_copy(model)
    client.register_module(CACHE_KEY, model)
    units = LINEAR_UNITS if unit == "linear" else DEPTH
    with open_session(client, model, unit, slots) as session:
        stats = session.stats()
        assert stats["units"] == units and stats["ring_slots"] >= slots
        assert stats["ring_arena_bytes"] == slots * stats["ring_slot_bytes"]
        assert stats["learning"] and session.schedule == ()
        # The module's tensors keep their shapes and dtypes (streamed weights: the read-only
        # pool view; the rest: the slab).
        assert model.blocks[0].ff_up.weight.shape == (96, 64)
        assert all(p.dtype == dtype and not p.requires_grad for p in model.parameters())

        assert mismatches(model, reference, range(20), dtype) == []

        stats = session.stats()
        assert not stats["learning"], stats
        assert stats["schedule_length"] == units
        assert len(session.schedule) == units and sorted(session.schedule) == list(range(units))
        # The learning forward asked for every unit out of schedule; the 19 others streamed
        # them from the ring, wrapping around it many times.
        assert stats["sync_uses"] == units, stats_summary(stats)
        assert stats["streamed_uses"] == 19 * units, stats_summary(stats)
        assert stats["skipped_uses"] == 0 and stats["uses"] == 20 * units
        assert stats["streamed_bytes_per_cycle"] == sum(
            layout.byte_size for layout in session.resources.units
        )
        assert 0 < stats["overhead_us_per_unit"] < 1000, stats
        info = sessions(client)[session.session_id[:8]]
        assert info.device_uuid == "cpu" and info.schedule_length == units
        assert info.ring_slots == stats["ring_slots"]
    # Closed: the module runs on the host pool's read-only views, with the same results.
    assert session.closed
    assert not listed(client, session.session_id)
    assert mismatches(model, reference, [0, 1], dtype) == []


def test_a_branch_that_breaks_the_schedule_is_served_and_counted(client):
    dtype = torch.float32
    model = make_model(dtype)
    reference = frozen_copy(model)
    client.register_module(CACHE_KEY, model)
    with open_session(client, model, "block", slots=3) as session:
        assert mismatches(model, reference, [0, 1], dtype) == []
        before = session.stats()
        assert before["skipped_uses"] == 0

        # Block 2 skipped: the runner skips its use of the schedule.
        skip_one = [0, 1, 3, 4, 5]
        assert mismatches(model, reference, [2], dtype, route=skip_one) == []
        after_skip = session.stats()
        assert after_skip["skipped_uses"] == before["skipped_uses"] + 1, after_skip
        assert after_skip["sync_uses"] == before["sync_uses"]

        # Block 1 run again after block 4: not among the next K-1 units, served out of
        # schedule from the extra slot.
        twice = [0, 1, 2, 3, 4, 1, 5]
        assert mismatches(model, reference, [3], dtype, route=twice) == []
        after_twice = session.stats()
        assert after_twice["sync_uses"] == after_skip["sync_uses"] + 1, after_twice

        # A full forward realigns to the cycle; then one that stops early leaves the cycle
        # mid-way, and the next one skips the rest of it.
        assert mismatches(model, reference, [4], dtype) == []
        aligned = session.stats()
        assert mismatches(model, reference, [5], dtype, route=[0, 1]) == []
        assert mismatches(model, reference, [6, 7], dtype) == []
        final = session.stats()
        assert final["skipped_uses"] == aligned["skipped_uses"] + (DEPTH - 2), final
        assert final["sync_uses"] == aligned["sync_uses"]
        assert final["streamed_uses"] == aligned["streamed_uses"] + 2 + 2 * DEPTH


def test_weights_stored_in_another_dtype_are_cast_to_the_input_dtype(client):
    # bfloat16 Linear modules (every one streams: no always-resident pattern) in a float32
    # model; the reference holds the same values in float32.
    model = make_model(torch.float32)
    for module in model.modules():
        if type(module) is nn.Linear:
            module.to(torch.bfloat16)
    reference = frozen_copy(model)
    for module in reference.modules():
        if type(module) is nn.Linear:
            module.to(torch.float32)
    client.register_module(CACHE_KEY, model)
    with open_session(client, model, DDO_ALWAYS_RESIDENT_MODULE_PATTERNS="") as session:
        assert session.stats()["units"] == LINEAR_UNITS + 2  # proj_in and proj_out too
        assert model.proj_in.weight.dtype == torch.bfloat16
        assert mismatches(model, reference, range(4), torch.float32) == []


def test_denoising_loops_of_changing_lengths_stay_exact(client):
    dtype = torch.bfloat16
    model = make_model(dtype)
    reference = frozen_copy(model)
    client.register_module(CACHE_KEY, model)
    with open_session(client, model, "linear", slots=3) as session:
        step = 0
        for steps in (1, 3, 1, 5, 2, 7):
            assert mismatches(model, reference, range(step, step + steps), dtype) == []
            step += steps
        stats = session.stats()
        assert stats["uses"] == step * LINEAR_UNITS
        assert stats["sync_uses"] == LINEAR_UNITS and stats["skipped_uses"] == 0, stats


def test_a_second_session_receives_the_schedule_and_streams_from_its_first_forward(client):
    dtype = torch.float32
    model = make_model(dtype)
    reference = frozen_copy(model)
    client.register_module(CACHE_KEY, model)
    with open_session(client, model, "linear", slots=3) as first:
        assert mismatches(model, reference, [0], dtype) == []
        learned = first.schedule
    assert learned

    again = make_model(dtype)
    with open_session(client, again, "linear", slots=3) as second:
        assert second.schedule == learned
        assert not second.stats()["learning"]
        assert mismatches(again, reference, [0, 1, 2], dtype) == []
        stats = second.stats()
        assert stats["sync_uses"] == 0 and stats["streamed_uses"] == 3 * LINEAR_UNITS, stats
        # Where opening it went (bench_flux_stream.py's warm runner prints these).
        parts = second.open_seconds
        assert set(parts) == {"attach", "map", "device_memory", "bind", "consumer", "total"}
        assert all(seconds >= 0 for seconds in parts.values())
        assert parts["total"] >= sum(v for k, v in parts.items() if k != "total") - 1e-6
    # Another plan (block units) has no schedule yet: it learns.
    with open_session(client, make_model(dtype), "block", slots=3) as third:
        assert third.schedule == () and third.stats()["learning"]


def test_two_processes_stream_one_component_at_once(client, daemon):
    dtype = torch.float32
    client.register_module(CACHE_KEY, make_model(dtype))
    env = child_env(daemon.address)
    children = [Child(RUNNER_SCRIPT, env, "float32", "30", unit) for unit in ("linear", "block")]
    try:
        opened = [child.read() for child in children]
        assert all(message["event"] == "open" for message in opened)
        assert all(child.read(60)["event"] == "streaming" for child in children)
        results = [child.read(60) for child in children]
        for child, result in zip(children, results):
            assert result["event"] == "done", (result, child.stderr())
            assert result["forwards"] == 30
            assert child.finish() == 0, child.stderr()
        linear, block = (result["stats"] for result in results)
        assert linear["streamed_uses"] == 29 * LINEAR_UNITS, linear
        assert block["streamed_uses"] == 29 * DEPTH, block
    finally:
        for child in children:
            child.close()


def test_a_runner_killed_mid_stream_loses_its_session_and_others_continue(client, daemon):
    dtype = torch.float32
    model = make_model(dtype)
    reference = frozen_copy(model)
    client.register_module(CACHE_KEY, model)
    with open_session(client, model, "linear", slots=2) as mine:
        assert mismatches(model, reference, [0], dtype) == []
        child = Child(RUNNER_SCRIPT, child_env(daemon.address), "float32", "forever", "linear")
        try:
            child_session = child.read()["session_id"]
            assert child.read()["event"] == "streaming"
            assert listed(client, child_session)
            os.kill(child.pid, signal.SIGKILL)
            killed = time.monotonic()
            assert wait_until(
                lambda: not listed(client, child_session),
                timeout=3,
            ), "ddod still lists the killed runner's session after 3 s"
            assert time.monotonic() - killed < 2.5
        finally:
            child.close()
        assert mismatches(model, reference, range(1, 8), dtype) == []
        assert mine.stats()["streamed_uses"] == 7 * LINEAR_UNITS


def test_a_runner_waiting_on_a_killed_ddod_raises_within_two_seconds(client, daemon):
    dtype = torch.float32
    model = make_model(dtype)
    reference = frozen_copy(model)
    client.register_module(CACHE_KEY, model)
    session = open_session(client, model, "linear", slots=2)
    try:
        assert mismatches(model, reference, [0, 1], dtype) == []
        daemon.proc.kill()  # stays a zombie: this process is its parent and has not reaped it
        outcome = {}

        def forward() -> None:
            started = time.monotonic()
            try:
                run(model, 2, dtype)
                outcome["result"] = "finished"
            except BaseException as error:  # noqa: B902 - the test inspects it
                outcome["result"] = error
            outcome["seconds"] = time.monotonic() - started

        thread = threading.Thread(target=forward, daemon=True)
        thread.start()
        thread.join(5)
        assert not thread.is_alive(), "the forward still waits 5 s after ddod died"
        error = outcome["result"]
        assert isinstance(error, DaemonGoneError), error
        assert f"pid {daemon.proc.pid}" in str(error)
        assert outcome["seconds"] < 2.0, outcome
    finally:
        session.close()  # ddod is gone: closing must not raise
        daemon.proc.wait()
    assert process_gone(daemon.proc.pid)
    # The module is back on the host pool's views and runs without ddod.
    assert mismatches(model, reference, [3], dtype) == []


def test_a_module_that_does_not_fit_the_component_is_refused(client):
    client.register_module(CACHE_KEY, make_model(torch.float32))
    other = make_model(torch.bfloat16)
    with pytest.raises(DdoError, match="another shape or dtype"):
        open_session(client, other)
    assert sessions(client) == {}
    # The refused module is untouched.
    assert other.blocks[0].to_q.weight.requires_grad
    assert "forward" not in other.blocks[0].to_q.__dict__


def test_a_module_built_on_the_meta_device_streams_the_pool_weights(client):
    dtype = torch.float32
    reference = frozen_copy(make_model(dtype))
    client.register_module(CACHE_KEY, make_model(dtype))
    skeleton = TinyTransformer().to("meta").eval()  # no data, only shapes and dtypes
    with pytest.raises(DdoError, match="'offsets'"):
        open_session(client, skeleton)  # a meta non-persistent buffer has no data
    skeleton.offsets = reference.offsets.clone()
    with open_session(client, skeleton):
        assert mismatches(skeleton, reference, range(3), dtype) == []
    # Closed, the skeleton holds the pool's views: a complete module on the CPU.
    assert not any(tensor.is_meta for tensor in skeleton.state_dict().values())
    assert mismatches(skeleton, reference, [3], dtype) == []


def test_an_invalid_setting_is_refused_by_ddod(client):
    client.register_module(CACHE_KEY, make_model(torch.float32))
    with pytest.raises(DdoError, match="DDO_RING_SLOTS"):
        open_session(client, make_model(torch.float32), slots=1)


def test_close_restores_the_module_to_the_host_pool_views(client):
    dtype = torch.float32
    model = make_model(dtype)
    reference = frozen_copy(model)
    client.register_module(CACHE_KEY, model)
    session = open_session(client, model)
    run(model, 0, dtype)
    linear = model.blocks[0].to_q
    assert "forward" in linear.__dict__
    session.close()
    session.close()  # idempotent
    assert "forward" not in linear.__dict__
    assert model._forward_hooks == {} and model._forward_pre_hooks == {}
    pool = client.attach(CACHE_KEY)
    try:
        for name, tensor in model.state_dict().items():
            assert tensor.device.type == "cpu"
            assert torch.equal(tensor, pool.tensors[name]), name
    finally:
        pool.close()
    assert mismatches(model, reference, [1, 2], dtype) == []


class LoraLinear(nn.Module):
    """The structure of PEFT's ``peft.tuners.lora.layer.Linear`` (PEFT is not installed here):
    the original ``nn.Linear`` as ``base_layer``, low-rank ``lora_A``/``lora_B`` adapters in
    ModuleDicts, and a forward that adds the scaled adapter output to the base layer's."""

    def __init__(self, base_layer: nn.Linear, rank: int = 4, alpha: float = 8.0) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.lora_A = nn.ModuleDict(
            {"default": nn.Linear(base_layer.in_features, rank, bias=False)})
        self.lora_B = nn.ModuleDict(
            {"default": nn.Linear(rank, base_layer.out_features, bias=False)})
        self.scaling = {"default": alpha / rank}
        with torch.no_grad():
            self.lora_B["default"].weight.normal_(0, 0.02)  # PEFT starts at zero; trained != 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        result = self.base_layer(x)
        adapter = self.lora_B["default"](self.lora_A["default"](x))
        return result + adapter * self.scaling["default"]


def test_peft_lora_base_layers_stream_and_adapters_stay_the_runners(client):
    dtype = torch.float32
    model = make_model(dtype)
    torch.manual_seed(7)
    for block in model.blocks:
        block.to_q = LoraLinear(block.to_q)
        block.ff_up = LoraLinear(block.ff_up)
    model = model.to(dtype).eval()
    reference = frozen_copy(model)
    component = client.register_module(CACHE_KEY, model)
    # The component is the base model, under the unwrapped names; the adapters are not in it.
    names = {spec.name for spec in client.component(CACHE_KEY, with_layout=True).info.tensors}
    assert names == set(frozen_copy(make_model(dtype)).state_dict())
    assert component.tensor_count == len(names)
    # A threshold of 4 KiB streams the base layers (64x64 and 96x64 float32 = 16 and 24 KiB).
    with client.stream(model, CACHE_KEY, device="cpu",
                       settings={"DDO_SMALL_TENSOR_THRESHOLD_KB": "4"}) as session:
        streamed = {tensor.name for unit in session.resources.units for tensor in unit.tensors}
        resident = {tensor.name for tensor in session.resources.resident}
        stats = session.stats()
        # Every block streams its four Linear weights: two of them through base_layer.
        assert stats["units"] == LINEAR_UNITS
        assert mismatches(model, reference, range(6), dtype) == []
        assert isinstance(model.blocks[0].to_q, LoraLinear)
        assert model.blocks[0].to_q.lora_A["default"].weight.shape == (4, 64)
        assert "blocks.0.to_q.weight" in streamed
        assert "blocks.0.to_q.bias" in resident
        # The adapters are the runner's own, plain tensors on the execution device.
        adapter = model.blocks[0].to_q.lora_A["default"].weight
        assert type(adapter) is nn.Parameter and adapter.device.type == "cpu"


def _plan_value(session, key):
    return {d.key: d.value for d in session.plan.decisions}[key]


def test_warm_process_keeps_the_slab_for_the_next_runner(daemon_factory, short_dir):
    warm = daemon_factory(os.path.join(short_dir, "warm", "ddod.sock"), "--preset", "warm_process")
    dtype = torch.float32
    model = make_model(dtype)
    reference = frozen_copy(model)
    with DdoClient.connect(warm.address) as client:
        client.register_module(CACHE_KEY, model)
        with open_session(client, model) as first:
            slab = first.resources.resident_slab_shm
            assert _plan_value(first, "slab") == "filled now"
            assert mismatches(model, reference, range(2), dtype) == []
        # The slab outlived its session: still in /dev/shm, and the next session gets it.
        assert os.path.exists("/dev/shm/" + slab.lstrip("/"))
        with open_session(client, model) as second:
            assert second.resources.resident_slab_shm == slab
            assert _plan_value(second, "slab") == "warm"
            assert mismatches(model, reference, range(3), dtype) == []
        # Another plan (other resident tensors) does not take it...
        with open_session(client, model, DDO_SMALL_TENSOR_THRESHOLD_KB="1024") as other:
            other_slab = other.resources.resident_slab_shm
            assert other_slab != slab
        # ...and when it closes, its slab replaces the first: one warm slab per device.
        assert os.path.exists("/dev/shm/" + other_slab.lstrip("/"))
        assert not os.path.exists("/dev/shm/" + slab.lstrip("/"))


def test_without_warm_process_a_slab_goes_with_its_session(client):
    model = make_model(torch.float32)
    client.register_module(CACHE_KEY, model)
    with open_session(client, model) as first:
        slab = first.resources.resident_slab_shm
    assert not os.path.exists("/dev/shm/" + slab.lstrip("/"))
    with open_session(client, model) as second:
        assert second.resources.resident_slab_shm != slab
        assert _plan_value(second, "slab") == "filled now"
