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
