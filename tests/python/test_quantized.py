"""Quantized and packed weights are recognised by class (without importing the backends) and
never reach the dense-Linear streaming path."""

import logging
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from diffusers_dynamic_offloader.quantized import (
    detect_quantized_backend_modules,
    is_plain_tensor,
    quantized_backend_of,
)
from diffusers_dynamic_offloader.streaming import streamable_weights
from support import install_fake_group_offloading


def fake_class(name: str, module: str, bases=(nn.Module,), body=None) -> type:
    """A class named and placed like a backend's own (the backends are not installed here)."""
    namespace = dict(body or {})
    namespace["__module__"] = module
    return type(name, bases, namespace)


def with_weight(module: nn.Module, tensor: torch.Tensor) -> nn.Module:
    module._parameters["weight"] = tensor  # as the backends install their parameters
    return module


def subclass_tensor(name: str, module: str) -> torch.Tensor:
    kind = fake_class(name, module, bases=(torch.Tensor,))
    return torch.Tensor._make_subclass(kind, torch.zeros(8, 16))


def examples():
    sdnq = nn.Linear(16, 8)
    sdnq.sdnq_dequantizer = object()
    Linear4bit = fake_class("Linear4bit", "bitsandbytes.nn.modules")
    Params4bit = fake_class("Params4bit", "bitsandbytes.nn.modules", bases=(nn.Parameter,))
    QLinear = fake_class("QLinear", "optimum.quanto.nn.qlinear")
    GGUFParameter = fake_class("GGUFParameter", "diffusers.quantizers.gguf.utils",
                               bases=(nn.Parameter,))
    packed = nn.Linear(16, 9)
    packed.weight = nn.Parameter(torch.zeros(9, 8, dtype=torch.uint8), requires_grad=False)
    return {
        "sdnq": sdnq,
        "bnb_module": Linear4bit(),
        "bnb_parameter": with_weight(nn.Linear(16, 8), Params4bit(torch.zeros(8, 16), requires_grad=False)),
        "quanto_module": QLinear(),
        "quanto_tensor": with_weight(nn.Linear(16, 8), subclass_tensor("WeightQBytesTensor", "optimum.quanto.tensor")),
        "torchao": with_weight(nn.Linear(16, 8), subclass_tensor("AffineQuantizedTensor", "torchao.dtypes")),
        "gguf": with_weight(nn.Linear(16, 8), GGUFParameter(torch.zeros(8, 16), requires_grad=False)),
        "other_subclass": with_weight(nn.Linear(16, 8), subclass_tensor("MyPackedTensor", "mylib")),
        "packed": packed,
        "dense": nn.Linear(16, 8),
    }


EXPECTED = {
    "sdnq": "sdnq", "bnb_module": "bitsandbytes", "bnb_parameter": "bitsandbytes",
    "quanto_module": "quanto", "quanto_tensor": "quanto", "torchao": "torchao", "gguf": "gguf",
    "other_subclass": "tensor_subclass", "packed": "packed", "dense": "",
}


def test_every_backend_is_recognised_by_its_classes():
    for name, module in examples().items():
        backend, reason = quantized_backend_of(module)
        assert backend == EXPECTED[name], (name, backend, reason)
        assert bool(reason) == bool(backend)


def test_the_payload_extends_the_seeds():
    model = nn.Sequential(*examples().values())
    payload = detect_quantized_backend_modules(model)
    # The seed's keys for SDNQ, and the same shape for every other backend.
    assert payload["sdnq_module_count"] == 1
    assert payload["sdnq_status"] == "detected_forward_preserved"
    assert payload["bitsandbytes_module_count"] == 2
    assert payload["quantized_backends"] == sorted(set(EXPECTED.values()) - {""})
    assert payload["quantized_modules"]["6"] == "gguf"
    assert detect_quantized_backend_modules(nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))) == {}


def test_only_plain_dense_linear_weights_are_streamable():
    modules = examples()
    model = nn.Sequential(*modules.values())
    names = streamable_weights(model)
    dense_index = list(modules).index("dense")
    assert names == [f"{dense_index}.weight"]


def test_plain_tensors():
    assert is_plain_tensor(torch.zeros(2))
    assert is_plain_tensor(nn.Parameter(torch.zeros(2)))
    assert not is_plain_tensor(subclass_tensor("X", "x"))
    assert not is_plain_tensor(torch.zeros(2, 2).to_sparse())


def test_unpatchable_linears_are_counted_as_the_seed_did(client):
    import diffusers_dynamic_offloader as ddo

    class Reshaped(nn.Linear):
        pass

    odd = nn.Linear(4, 4)
    odd.weight = nn.Parameter(torch.zeros(16))  # not (out_features, in_features)
    model = nn.Sequential(nn.Linear(8, 8), odd, Reshaped(4, 4))
    # The DDO route asked for explicitly (left to the policy, the packed-looking weight would
    # divert the component to group offload): the odd Linear keeps its own forward.
    with ddo.enable_dynamic_offload(model, component="transformer", execution_device="cpu",
                                    client=client, environ={}) as result:
        assert result.route == "dynamic_offload"
        state = ddo.get_dynamic_offload_state(model)
        # The odd one; the well-formed subclass streams with its own forward.
        assert state.planner_decisions["unsupported_linear_module_count"] == 1
        with torch.no_grad():
            assert model[0](torch.ones(1, 8)).shape == (1, 8)


class PackedWithoutFeatures(nn.Linear):
    """A Linear subclass that skips ``Linear.__init__`` (as packed and quantized layers often
    do): no ``in_features`` / ``out_features``."""

    def __init__(self, weight: torch.Tensor) -> None:
        nn.Module.__init__(self)
        self.weight = nn.Parameter(weight, requires_grad=False)
        self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight) * 0.5


def without_features_model() -> nn.Module:
    torch.manual_seed(5)
    return nn.Sequential(nn.Linear(8, 8), PackedWithoutFeatures(torch.randn(8, 8)),
                         nn.Linear(8, 8)).requires_grad_(False)


def test_a_linear_subclass_without_features_is_neither_quantized_nor_streamed():
    model = without_features_model()
    assert quantized_backend_of(model[1]) == ("", "")
    assert detect_quantized_backend_modules(model) == {}
    assert streamable_weights(model) == ["0.weight", "2.weight"]
    # Judged by what it has: a 3-D weight is packed even without the attributes.
    packed = PackedWithoutFeatures(torch.zeros(2, 4, 4))
    assert quantized_backend_of(packed)[0] == "packed"


@pytest.mark.parametrize("entry", ["enable_offload", "enable_dynamic_offload",
                                   "enable_pipeline_offload"])
def test_every_entry_point_runs_a_linear_subclass_without_features(client, entry):
    import diffusers_dynamic_offloader as ddo

    model, reference = without_features_model(), without_features_model()
    keywords = dict(execution_device="cpu", client=client, environ={},
                    small_tensor_threshold_kb=0)
    if entry == "enable_pipeline_offload":
        results = ddo.enable_pipeline_offload(
            types.SimpleNamespace(components={"transformer": model}), **keywords)
        result = results["transformer"]
    else:
        result = getattr(ddo, entry)(model, component="transformer", **keywords)
    try:
        assert result.route == "dynamic_offload"
        state = ddo.get_dynamic_offload_state(model)
        assert state.planner_decisions["unsupported_linear_module_count"] == 1
        assert result.hook.session.stats()["units"] == 2  # the two plain Linears stream
        x = torch.randn(3, 8)
        with torch.no_grad():
            assert torch.equal(model(x), reference(x))
    finally:
        ddo.remove_dynamic_offload(result)


def test_a_quantized_component_keeps_its_route_with_the_reason_in_the_setup_line(
        client, caplog, monkeypatch):
    import diffusers_dynamic_offloader as ddo

    calls = []
    install_fake_group_offloading(monkeypatch, lambda module, kwargs: calls.append(module))
    caplog.set_level(logging.INFO, logger="diffusers_dynamic_offloader")
    modules = examples()
    model = nn.Sequential(modules["bnb_module"], modules["gguf"], modules["dense"])
    result = ddo.enable_offload(model, component="transformer", execution_device="cpu",
                                client=client, environ={})
    assert result.route == "diffusers_group_offload" and calls == [model]
    (line,) = [r.getMessage() for r in caplog.records
               if r.name == "diffusers_dynamic_offloader" and "transformer:" in r.getMessage()]
    assert "diffusers_group_offload on cpu from cpu" in line, line
    assert "1 bitsandbytes module (first: 0): bitsandbytes' quantization state" in line, line
    assert "1 gguf module (first: 1): GGUF's packed blocks" in line, line
    assert result.event_payload["route_reason"] in line
