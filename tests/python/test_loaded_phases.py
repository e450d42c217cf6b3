"""A staged run of components built by ``load_from_ddod`` under a RAM budget (issue 33, item
2, as a runner on the consumer machine does it: no weights in the runner, ddod reads the
checkpoints). Against a real ddod with ``--ram-budget-gb 0.25`` on the host backend.

A module bound to ddod's copy maps its pool pages: while it does, ddod cannot move the
component to its files (an attached component stays), and if it did, the runner's mapping
would keep the pages. So the run gives back the weights of every such module between passes
(meta tensors, the attachment closed) and binds them again when routed or called.
"""

from __future__ import annotations

import json
import os
import types

import pytest
import torch

import diffusers_dynamic_offloader as ddo
from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader.seed_compat.staged import Stages, run_staged
from tower_support import Tower, built_tower, write_checkpoint

MIB = 1 << 20
BUDGET_GB = 0.25
WIDTH, LAYERS = 512, 192  # 192 MiB of fp32 weights: 3/4 of the budget


class ConfiguredTower(Tower):
    """The tower with Diffusers' ConfigMixin surface (load_config, from_config)."""

    @classmethod
    def load_config(cls, path, subfolder=None):
        with open(os.path.join(path, subfolder or "", "config.json")) as file:
            return json.load(file)

    @classmethod
    def from_config(cls, config):
        return cls(config["width"], config["layers"])


class TowerConfig:
    """A transformers-style config class: ``from_pretrained(folder)`` reads its config.json."""

    def __init__(self, width: int, layers: int) -> None:
        self.width, self.layers = width, layers

    @classmethod
    def from_pretrained(cls, folder):
        with open(os.path.join(folder, "config.json")) as file:
            config = json.load(file)
        return cls(config["width"], config["layers"])


class TransformersStyleTower(Tower):
    """A text encoder as transformers builds one: ``config_class`` and ``__init__(config)``."""

    config_class = TowerConfig

    def __init__(self, config: TowerConfig) -> None:
        super().__init__(config.width, config.layers)


class TwoTowerPipeline:
    """A Diffusers-shaped pipeline: a text encoder and a transformer, both towers."""

    def __init__(self, text_encoder, transformer) -> None:
        self.text_encoder, self.transformer = text_encoder, transformer

    @property
    def components(self):
        return {"text_encoder": self.text_encoder, "transformer": self.transformer}

    @torch.no_grad()
    def __call__(self, prompt_embeds=None, num_inference_steps=2, output_type="latent"):
        latents = prompt_embeds
        for _ in range(num_inference_steps):
            latents = self.transformer(latents)
        return types.SimpleNamespace(images=latents)


STAGES = Stages(encode=lambda pipe, prompt, **_: {"prompt_embeds": pipe.text_encoder(prompt)},
                decode=lambda pipe, latents, **_: latents, decoding=())
# Nothing resident: a host-backend session's slab and ring count in the RAM budget too.
ROUTING = {"environ": {}, "execution_device": "cpu", "small_tensor_threshold_kb": 0,
           "resident_module_budget_gb": 0.001}


@pytest.fixture
def checkpoints(short_dir):
    """The model folder (text_encoder/ and transformer/ with a config and a checkpoint each)
    and the towers it holds."""
    root = os.path.join(short_dir, "model")
    towers = {"text_encoder": built_tower(WIDTH, LAYERS, 1),
              "transformer": built_tower(WIDTH, LAYERS, 2)}
    for name, tower in towers.items():
        os.makedirs(os.path.join(root, name))
        with open(os.path.join(root, name, "config.json"), "w") as file:
            json.dump({"width": WIDTH, "layers": LAYERS}, file)
        write_checkpoint(os.path.join(root, name, "model.safetensors"), tower)
    return root, towers


@pytest.fixture
def small_ram_daemon(daemon_factory, short_dir):
    return daemon_factory(os.path.join(short_dir, "run", "ddod.sock"),
                          "--ram-budget-gb", str(BUDGET_GB))


def load(client, root: str, name: str, bind: bool = True):
    return ddo.load_from_ddod(ConfiguredTower, root, subfolder=name, client=client,
                              progress=False, bind=bind)


def test_an_unbound_load_holds_nothing_and_binds_again_when_called(small_ram_daemon,
                                                                   checkpoints):
    root, towers = checkpoints
    x = torch.randn(3, WIDTH, generator=torch.Generator().manual_seed(5))
    with DdoClient.connect(small_ram_daemon.address, timeout=60) as client:
        te = load(client, root, "text_encoder", bind=False)
        assert all(p.is_meta for p in te.module.parameters())
        assert client.component(te.cache_key).sessions == 0
        # Unattached, the text encoder goes to its file for the transformer's load.
        transformer = load(client, root, "transformer", bind=False)
        assert client.component(te.cache_key).tier == "FILE"
        assert client.component(transformer.cache_key).tier == "POOL"
        with torch.no_grad():
            assert torch.equal(te.module(x), towers["text_encoder"](x))  # bound by the call
        assert not any(p.is_meta for p in te.module.parameters())
        assert client.component(te.cache_key).sessions == 1


def test_a_staged_run_moves_loaded_components_through_the_pool(small_ram_daemon, checkpoints):
    root, towers = checkpoints
    x = torch.randn(3, WIDTH, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        expected = towers["transformer"](towers["transformer"](towers["text_encoder"](x)))
    events = []

    def record(name, seconds, **payload):
        events.append((name, payload))

    with DdoClient.connect(small_ram_daemon.address, timeout=60) as client:
        # Bound as load_from_ddod leaves them by default: the text encoder is attached when
        # the transformer loads, so the transformer gets what is left (SPLIT).
        te, transformer = load(client, root, "text_encoder"), load(client, root, "transformer")
        assert client.component(transformer.cache_key).tier == "SPLIT"
        pipe = TwoTowerPipeline(te.module, transformer.module)
        for _ in range(2):
            output = run_staged(pipe, STAGES, client=client, offload_kwargs=ROUTING,
                                record_event=record, prompt=x, num_inference_steps=2)
            assert torch.equal(output, expected)
        phases = [(name, payload) for name, payload in events if name.startswith("phase_")]
        assert [name for name, _ in phases] == ["phase_prompt", "phase_denoise", "phase_decode",
                                                "phase_after_run"] * 2
        first, second = dict(phases[:4]), dict(phases[4:])
        # Denoising needs the transformer, split at its load: the text encoder, given back,
        # goes to its file and the transformer is read back whole before its session opens.
        assert first["phase_denoise"]["demoted_bytes"] == 192 * MIB, first["phase_denoise"]
        assert first["phase_denoise"]["promoted_bytes"] > 0, first["phase_denoise"]["notes"]
        # Decode prefetches the text encoder for the next prompt into free room only: the
        # transformer stays in the pool, the next prompt streams the text encoder from its
        # file, and the next denoising pass finds the transformer where it was.
        assert first["phase_decode"]["demoted_bytes"] == 0, first["phase_decode"]
        assert client.component(transformer.cache_key).tier == "POOL"
        assert second["phase_prompt"]["demoted_bytes"] == 0, second["phase_prompt"]
        assert second["phase_denoise"]["demoted_bytes"] == 0, second["phase_denoise"]
        assert second["phase_denoise"]["promoted_bytes"] == 0, second["phase_denoise"]
        # Nothing of ddod's pool is held by the runner after the runs: no attachment.
        for key in (te.cache_key, transformer.cache_key):
            assert client.component(key).sessions == 0, key
        assert client.stats().pool.reserved_bytes <= int(BUDGET_GB * (1 << 30))
        assert client.stats().pool.evictions == 0


def test_a_transformers_class_loads_from_its_config_class(small_ram_daemon, checkpoints):
    root, towers = checkpoints
    x = torch.randn(3, WIDTH, generator=torch.Generator().manual_seed(5))
    with DdoClient.connect(small_ram_daemon.address, timeout=60) as client:
        loaded = ddo.load_from_ddod(TransformersStyleTower, root, subfolder="text_encoder",
                                    client=client, progress=False)
        with torch.no_grad():
            assert torch.equal(loaded.module(x), towers["text_encoder"](x))
        # Refused before anything is asked of ddod.
        with pytest.raises(TypeError, match="neither a Diffusers model class"):
            ddo.load_from_ddod(torch.nn.Linear, root, subfolder="transformer", client=client)
        assert [c.cache_key for c in client.components()] == [loaded.cache_key]
