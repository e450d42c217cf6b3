"""The learning forward reports what each Linear computes, and ddod plans the component's next
session with it (DDO_RESIDENT_MODULE_SELECTION=auto): the weights with the least compute per
byte stay resident (learned_rows.py, session_planner.cc). Real ddod, host backend, both
consumers; outputs bitwise equal to the model without DDO.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from diffusers_dynamic_offloader._proto import sessions_pb2
from streaming_support import CONSUMERS, use_consumer

WIDTH, TOKENS, DEPTH = 64, 32, 4
KEY = "modulated-transformer"
#: Room for the four modulation weights (4 x 96 KiB) and no feed-forward weight (64 KiB) beside
#: them; or for one whole block (224 KiB) of the four.
SETTINGS = {"DDO_SMALL_TENSOR_THRESHOLD_KB": "0", "DDO_RESIDENT_MODULE_BUDGET_GB": str(0.4 / 1024)}


@pytest.fixture(autouse=True, params=CONSUMERS)
def consumer(request, monkeypatch) -> str:
    use_consumer(monkeypatch, request.param)
    return request.param


class ModulatedBlock(nn.Module):
    """A DiT-like block: ``mod`` maps the conditioning vector (one row) to a scale and a shift,
    ``ff`` runs on every token."""

    def __init__(self) -> None:
        super().__init__()
        self.mod = nn.Linear(WIDTH, 6 * WIDTH)
        self.ff_up = nn.Linear(WIDTH, 4 * WIDTH)
        self.ff_down = nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        scale, shift = self.mod(condition)[:, :2 * WIDTH].chunk(2, dim=-1)
        h = x * (1 + scale[:, None]) + shift[:, None]
        return x + self.ff_down(torch.tanh(self.ff_up(h)))


class Modulated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(ModulatedBlock() for _ in range(DEPTH))

    def forward(self, x: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, condition)
        return x


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return Modulated().requires_grad_(False)


def inputs(step: int):
    generator = torch.Generator().manual_seed(step)
    return (torch.randn(1, TOKENS, WIDTH, generator=generator),
            torch.randn(1, WIDTH, generator=generator))


def decision(session, key: str) -> str:
    return {d.key: d.value for d in session.plan.decisions}.get(key, "")


def resident_names(session) -> set:
    return {tensor.name for tensor in session.resources.resident}


def test_the_next_session_keeps_the_one_row_linears_resident(client, monkeypatch):
    model, reference = make_model(), make_model()
    client.register_module(KEY, model)
    sent = []
    original = sessions_pb2.SetScheduleRequest

    def recording(*args, **kwargs):
        sent.append(dict(kwargs.get("weight_rows", {})))
        return original(*args, **kwargs)

    monkeypatch.setattr(sessions_pb2, "SetScheduleRequest", recording)
    with client.stream(model, KEY, device="cpu", settings=SETTINGS) as first:
        # Nothing learned yet: whole blocks, spread (the seed's rule).
        assert decision(first, "resident_selection") == "spread"
        assert decision(first, "resident_blocks").startswith("1 of 4"), \
            decision(first, "resident_blocks")
        with torch.no_grad():
            assert torch.equal(model(*inputs(0)), reference(*inputs(0)))
    # The learning forward counted rows: one per call for mod, TOKENS for the feed-forward.
    assert len(sent) == 1
    rows = sent[0]
    assert rows["blocks.0.mod.weight"] == 1
    assert rows["blocks.3.ff_up.weight"] == TOKENS
    assert rows["blocks.3.ff_down.weight"] == TOKENS
    assert len(rows) == 3 * DEPTH

    with client.stream(model, KEY, device="cpu", settings=SETTINGS) as second:
        assert decision(second, "resident_selection") == ""  # rows known: compute
        kept = decision(second, "resident_weights")
        assert kept.startswith(f"{DEPTH} of {3 * DEPTH} weights"), kept
        resident = resident_names(second)
        assert {f"blocks.{b}.mod.weight" for b in range(DEPTH)} <= resident
        assert not any("ff_" in name and name.endswith(".weight") for name in resident)
        with torch.no_grad():
            for step in range(3):
                assert torch.equal(model(*inputs(step)), reference(*inputs(step)))


def no_pre_hooks(model: nn.Module) -> bool:
    """No pre-hook on any Linear (the session's own hooks sit on the root)."""
    return all(not module._forward_pre_hooks for module in model.modules()
               if isinstance(module, nn.Linear))


def test_rows_are_counted_in_the_learning_forward_only(client):
    model = make_model()
    client.register_module(KEY, model)
    with client.stream(model, KEY, device="cpu", settings=SETTINGS):
        assert not no_pre_hooks(model)  # counting while the schedule is learned
        with torch.no_grad():
            model(*inputs(0))
        assert no_pre_hooks(model)
    # The next session is planned with the rows (another resident set, so another plan): it
    # learns its schedule, and counts again.
    with client.stream(model, KEY, device="cpu", settings=SETTINGS) as second:
        assert decision(second, "resident_weights")
        assert not no_pre_hooks(model)
        with torch.no_grad():
            model(*inputs(1))
    # The same plan again knows its schedule: nothing is counted.
    with client.stream(model, KEY, device="cpu", settings=SETTINGS) as third:
        assert list(third.schedule)
        assert no_pre_hooks(model)
    # A session closed before its learning forward leaves no hook behind.
    with client.stream(model, KEY, device="cpu", settings={**SETTINGS, "DDO_STREAM_UNIT": "block"}):
        assert not no_pre_hooks(model)
    assert no_pre_hooks(model)


def test_a_bad_weight_rows_name_is_refused_with_the_field(client):
    model = make_model()
    client.register_module(KEY, model)
    with client.stream(model, KEY, device="cpu", settings=SETTINGS) as session:
        rpc = session._open_rpc()
        with pytest.raises(Exception) as refused:
            rpc.unary("SetSchedule", sessions_pb2.SetScheduleRequest(
                session_id=session.session_id, unit_order=[0],
                weight_rows={"x" * 5000: 1}))
        assert "weight_rows" in str(refused.value)
