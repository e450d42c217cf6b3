"""AttachedComponent.bind: a module runs on the shared, read-only tensors of the pool."""

import copy

import pytest
import torch
from torch import nn

from diffusers_dynamic_offloader import BindError

VOCAB, WIDTH = 50, 16


class Net(nn.Module):
    """Parameters, persistent buffers (BatchNorm's int64 counter too), a tied weight and a
    non-persistent buffer."""

    def __init__(self, extra: bool = False, hidden: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.block = nn.Sequential(nn.Linear(WIDTH, hidden), nn.GELU(), nn.Linear(hidden, WIDTH))
        self.norm = nn.LayerNorm(WIDTH)
        self.bn = nn.BatchNorm1d(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight  # tied
        self.register_buffer("scale", torch.tensor(0.5))
        self.register_buffer("offsets", torch.linspace(0, 1, WIDTH), persistent=False)
        self.extra = nn.Linear(WIDTH, WIDTH) if extra else None

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids) + self.offsets
        x = x + self.block(x) * self.scale
        if self.extra is not None:
            x = self.extra(x)
        x = self.norm(x)
        x = self.bn(x.transpose(1, 2)).transpose(1, 2)
        return self.head(x)


def trained(seed: int, **kwargs) -> Net:
    torch.manual_seed(seed)
    net = Net(**kwargs)
    net.train()
    with torch.no_grad():
        for _ in range(3):  # non-trivial BatchNorm statistics
            net(torch.randint(0, VOCAB, (4, 7)))
    return net.eval()


IDS = torch.arange(14).reshape(2, 7) % VOCAB


def run(net: Net) -> torch.Tensor:
    with torch.no_grad():
        return net(IDS)


def reference_output(net: Net) -> torch.Tensor:
    """The output of ``net`` with its parameters frozen, as bind() leaves them: some torch
    builds (2.11 with oneDNN) pick another CPU Linear kernel for weights without
    requires_grad, whose results differ in the last bits."""
    frozen = copy.deepcopy(net)
    frozen.requires_grad_(False)
    return run(frozen)


def test_bound_module_matches_the_original(client):
    original = trained(0)
    expected = reference_output(original)
    component = client.register_module("net", original)
    assert component.tensor_count == len(original.state_dict()) - 1
    with client.attach("net") as attached:
        table = {spec.name: spec for spec in attached.component.info.tensors}
        # The tied weight is stored once; the non-persistent buffer not at all.
        assert set(attached.tensors) == set(original.state_dict()) - {"head.weight"}
        assert table["block.0.weight"].module_class == "Linear"
        assert table["block.0.weight"].module_path == "block.0"
        assert table["bn.running_mean"].is_buffer
        assert table["bn.running_mean"].module_class == "BatchNorm1d"
        assert not table["embed.weight"].is_buffer
        assert table["scale"].module_path == "" and table["scale"].module_class == "Net"

        fresh = trained(1).eval()
        assert not torch.equal(run(fresh), expected)
        result = attached.bind(fresh)
        assert result.missing_keys == [] and result.unexpected_keys == []
        assert torch.equal(run(fresh), expected)
        # Zero-copy, no gradients, ties kept, buffers bound, transient buffers untouched.
        assert fresh.block[0].weight.data_ptr() == attached.tensors["block.0.weight"].data_ptr()
        assert isinstance(fresh.block[0].weight, nn.Parameter)
        assert not any(parameter.requires_grad for parameter in fresh.parameters())
        assert fresh.head.weight is fresh.embed.weight
        assert fresh.bn.num_batches_tracked.data_ptr() == (
            attached.tensors["bn.num_batches_tracked"].data_ptr()
        )
        assert torch.equal(fresh.offsets, original.offsets)


def test_units_by_module(client):
    component = client.register_module("net-units", trained(0), units="module")
    owners = {name.rpartition(".")[0] for name in trained(0).state_dict() if name != "head.weight"}
    assert component.unit_count == len(owners)


def test_strict_bind_lists_missing_names_and_changes_nothing(client):
    client.register_module("net", trained(0))
    bigger = trained(2, extra=True)
    before = {name: tensor.data_ptr() for name, tensor in bigger.state_dict().items()}
    with client.attach("net") as attached:
        with pytest.raises(BindError) as raised:
            attached.bind(bigger)
        assert raised.value.missing == ("extra.weight", "extra.bias")
        assert raised.value.unexpected == ()
        assert "'extra.weight'" in str(raised.value) and "'extra.bias'" in str(raised.value)
        assert {n: t.data_ptr() for n, t in bigger.state_dict().items()} == before
        # Not strict: the rest is bound, the missing names are reported.
        result = attached.bind(bigger, strict=False)
        assert result.missing_keys == ["extra.weight", "extra.bias"]
        assert bigger.block[0].weight.data_ptr() == attached.tensors["block.0.weight"].data_ptr()
        assert bigger.extra.weight.data_ptr() == before["extra.weight"]


def test_strict_bind_lists_unexpected_names(client):
    client.register_module("net-extra", trained(0, extra=True))
    with client.attach("net-extra") as attached:
        with pytest.raises(BindError) as raised:
            attached.bind(trained(3))
        assert raised.value.unexpected == ("extra.weight", "extra.bias")
        assert "unexpected" in str(raised.value) and "'extra.bias'" in str(raised.value)
        assert attached.bind(trained(3), strict=False).unexpected_keys == [
            "extra.weight",
            "extra.bias",
        ]


def test_shape_and_dtype_mismatches_are_refused(client):
    client.register_module("net", trained(0))
    with client.attach("net") as attached:
        with pytest.raises(BindError) as raised:
            attached.bind(trained(4, hidden=64), strict=False)
        assert "block.0.weight: component float32 [32, 16], module float32 [64, 16]" in str(
            raised.value
        )
        with pytest.raises(BindError) as raised:
            attached.bind(trained(4).half(), strict=False)
        assert "embed.weight: component float32 [50, 16], module float16 [50, 16]" in str(
            raised.value
        )


def test_bound_module_keeps_working_after_close(client):
    original = trained(0)
    expected = reference_output(original)
    client.register_module("net", original)
    fresh = trained(5)
    attached = client.attach("net")
    attached.bind(fresh)
    attached.close()
    assert torch.equal(run(fresh), expected)


def test_an_attached_component_keeps_its_clients_lease(daemon):
    """The session is the lease's: dropping the client while the attached component is in use
    must not end the lease (the component holds the client's channel, which owns the lease);
    dropping the component too ends it."""
    import gc
    import time

    from diffusers_dynamic_offloader import DdoClient
    from diffusers_dynamic_offloader._proto import sessions_pb2

    def listed(observer: DdoClient) -> set:
        answer = observer.rpc.unary("ListSessions", sessions_pb2.ListSessionsRequest())
        return {session.session_id for session in answer.sessions}  # 8-digit prefixes

    client = DdoClient.connect(daemon.address, timeout=10)
    client.register_state_dict("bind/kept", {"w": torch.arange(8.0)})
    attached = client.attach("bind/kept")
    session = attached.session_id[:8]
    del client
    gc.collect()
    with DdoClient.connect(daemon.address, timeout=10) as observer:
        assert session in listed(observer)
        assert torch.equal(attached.tensors["w"], torch.arange(8.0))
        del attached
        gc.collect()
        deadline = time.monotonic() + 10
        while session in listed(observer) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert session not in listed(observer)  # the lease ended, and its session with it
