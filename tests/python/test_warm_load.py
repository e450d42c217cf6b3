"""Loading a component from ddod instead of its checkpoint: the module built from its config
with its parameters on the meta device, every weight bound to ddod's copy (cold: ddod reads
the safetensors itself; warm: nothing is read). Against a real ddod."""

import json
import os

import pytest
import torch

import diffusers_dynamic_offloader as ddo
from diffusers_dynamic_offloader import BindError
from store_support import write_safetensors
from streaming_support import FEATURES, TinyTransformer


class ConfiguredTransformer(TinyTransformer):
    """The synthetic transformer with Diffusers' ConfigMixin surface (load_config,
    from_config), as a ModelMixin subclass has it."""

    config_name = "config.json"

    @classmethod
    def load_config(cls, path, subfolder=None):
        with open(os.path.join(path, subfolder or "", cls.config_name)) as file:
            return json.load(file)

    @classmethod
    def from_config(cls, config):
        assert config["_class_name"] == cls.__name__
        return cls()


@pytest.fixture
def checkpoint(short_dir):
    torch.manual_seed(3)
    model = ConfiguredTransformer().eval()
    folder = os.path.join(short_dir, "model", "transformer")
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as file:
        json.dump({"_class_name": "ConfiguredTransformer"}, file)
    write_safetensors(os.path.join(folder, "diffusion_pytorch_model.safetensors"),
                      {name: tensor.contiguous() for name, tensor in model.state_dict().items()})
    return os.path.join(short_dir, "model"), model


def test_cold_then_warm_loads_bind_ddods_copy(client, checkpoint):
    path, reference = checkpoint
    inputs = torch.randn(2, 5, FEATURES)
    cold = ddo.load_from_ddod(ConfiguredTransformer, path, subfolder="transformer", client=client)
    assert not cold.warm
    module = cold.module
    assert not any(p.is_meta for p in module.parameters())
    assert torch.equal(module.offsets, reference.offsets)  # built, not in the checkpoint
    with torch.no_grad():
        assert torch.equal(module(inputs), reference(inputs))
    # A second runner finds the weights in ddod's pool and reads no file.
    warm = ddo.load_from_ddod(ConfiguredTransformer, path, subfolder="transformer", client=client)
    assert warm.warm and warm.cache_key == cold.cache_key
    with torch.no_grad():
        assert torch.equal(warm.module(inputs), reference(inputs))
    # Routed with its key, nothing is uploaded again: one component in the pool.
    result = ddo.enable_offload(warm.module, component="transformer", cache_key=warm.cache_key,
                                execution_device="cpu", client=client, environ={})
    try:
        assert result.route == "dynamic_offload"
        with torch.no_grad():
            assert torch.equal(warm.module(inputs), reference(inputs))
        assert [c.cache_key for c in client.components()] == [warm.cache_key]
    finally:
        result.release()


def test_a_dtype_the_checkpoint_does_not_have_is_a_bind_error(client, checkpoint):
    path, _ = checkpoint
    with pytest.raises(BindError, match="bfloat16|BF16|bf16"):
        ddo.load_from_ddod(ConfiguredTransformer, path, subfolder="transformer",
                           torch_dtype=torch.bfloat16, client=client)


def test_auto_dtype_binds_a_checkpoint_of_mixed_dtypes_as_it_is(client, short_dir):
    # What enable_layerwise_casting saves: weights in a storage dtype beside norms and biases
    # in another (fp8 and bf16 on the GPU machine; bf16 and fp32 here, torch 1.13 has no fp8).
    torch.manual_seed(4)
    model = ConfiguredTransformer().eval()
    stored = {name: (tensor.to(torch.bfloat16) if name.endswith("weight") else tensor).contiguous()
              for name, tensor in model.state_dict().items()}
    assert len({tensor.dtype for tensor in stored.values()}) == 2
    folder = os.path.join(short_dir, "mixed", "transformer")
    os.makedirs(folder)
    with open(os.path.join(folder, "config.json"), "w") as file:
        json.dump({"_class_name": "ConfiguredTransformer"}, file)
    write_safetensors(os.path.join(folder, "diffusion_pytorch_model.safetensors"), stored)
    path = os.path.join(short_dir, "mixed")

    with pytest.raises(BindError):  # the class's own fp32 does not fit the bf16 weights
        ddo.load_from_ddod(ConfiguredTransformer, path, subfolder="transformer", client=client)
    with pytest.raises(ValueError, match="auto"):
        ddo.load_from_ddod(ConfiguredTransformer, path, subfolder="transformer",
                           torch_dtype="float8", client=client)
    loaded = ddo.load_from_ddod(ConfiguredTransformer, path, subfolder="transformer",
                                torch_dtype="auto", client=client)
    bound = loaded.module.state_dict()
    for name, tensor in stored.items():
        assert bound[name].dtype == tensor.dtype, name
        assert torch.equal(bound[name], tensor), name
    # Unbound (bind=False, as a staged run loads), the meta weights keep the stored dtypes,
    # so binding again later fits.
    unbound = ddo.load_from_ddod(ConfiguredTransformer, path, subfolder="transformer",
                                 torch_dtype="auto", client=client, bind=False).module
    for name, param in unbound.named_parameters():
        assert param.is_meta and param.dtype == stored[name].dtype, name


class TiedEncoder(torch.nn.Module):
    """T5's shape of a tie (transformers' ``tie_weights``): ``shared`` and
    ``encoder.embed_tokens`` are two modules with one weight, which the checkpoint holds once,
    as ``shared.weight``."""

    def __init__(self) -> None:
        super().__init__()
        self.shared = torch.nn.Embedding(16, 8)
        self.encoder = torch.nn.Module()
        self.encoder.embed_tokens = torch.nn.Embedding(16, 8)
        self.encoder.embed_tokens.weight = self.shared.weight
        self.encoder.proj = torch.nn.Linear(8, 8)


def test_auto_dtype_keeps_a_tied_weight_tied_when_the_checkpoint_names_it_once():
    from diffusers_dynamic_offloader.seed_compat.loading import (parameters_on_meta,
                                                                 take_stored_dtypes)
    with parameters_on_meta():
        module = TiedEncoder()
    stored = {"shared.weight": torch.zeros(16, 8, dtype=torch.bfloat16),
              "encoder.proj.weight": torch.zeros(8, 8, dtype=torch.bfloat16),
              "encoder.proj.bias": torch.zeros(8)}
    take_stored_dtypes(module, stored)
    assert module.encoder.embed_tokens.weight is module.shared.weight, "the tie is kept"
    assert module.shared.weight.dtype == torch.bfloat16 and module.shared.weight.is_meta
    assert module.encoder.proj.weight.dtype == torch.bfloat16
    assert module.encoder.proj.bias.dtype == torch.float32
