"""Staged and full runs of a synthetic pipeline against a real ddod (host backend): the same
output, one pass's components held at a time, everything released at the end."""

import types

import torch
from torch import nn

import diffusers_dynamic_offloader as ddo
from diffusers_dynamic_offloader.seed_compat.staged import Stages, run_staged
from streaming_support import FEATURES, make_model


class SyntheticPipeline:
    """A Diffusers-shaped pipeline on small torch modules: ``components``, ``encode_prompt``,
    ``__call__(prompt | prompt_embeds, num_inference_steps, output_type)`` and a VAE."""

    def __init__(self) -> None:
        torch.manual_seed(0)
        self.text_encoder = nn.Sequential(nn.Linear(8, 64), nn.GELU(), nn.Linear(64, FEATURES))
        self.transformer = make_model(torch.float32)
        self.vae = nn.Linear(FEATURES, 3)
        self.scheduler = types.SimpleNamespace(steps=None)  # not a module: skipped
        self.calls = []

    @property
    def components(self):
        return {"text_encoder": self.text_encoder, "transformer": self.transformer,
                "vae": self.vae, "scheduler": self.scheduler}

    def encode_prompt(self, prompt):
        tokens = torch.tensor([[float(ord(c) % 13) for c in (prompt * 8)[:8]]])
        return self.text_encoder(tokens)

    @torch.no_grad()
    def __call__(self, prompt=None, prompt_embeds=None, num_inference_steps=4, output_type="np"):
        self.calls.append("call")
        embeds = self.encode_prompt(prompt) if prompt_embeds is None else prompt_embeds
        latents = torch.zeros(1, 5, FEATURES)
        for step in range(num_inference_steps):
            latents = latents + 0.1 * self.transformer(latents + embeds[:, None, :] * (step + 1))
        if output_type == "latent":
            return types.SimpleNamespace(images=latents)
        return types.SimpleNamespace(images=self.vae(latents))


# CI has no diffusers: the text encoder, which would get Diffusers group offload, runs unmanaged.
NO_DIFFUSERS = {"text_encoder": {"route": "none"}}


def synthetic_stages() -> Stages:
    return Stages(encode=lambda pipe, prompt, **_: {"prompt_embeds": pipe.encode_prompt(prompt)},
                  decode=lambda pipe, latents, **_: types.SimpleNamespace(images=pipe.vae(latents)))


def test_staged_and_full_runs_give_the_same_output(client):
    full_pipe = SyntheticPipeline()
    results = ddo.enable_pipeline_offload(full_pipe, client=client, environ={},
                                          execution_device="cpu", small_tensor_threshold_kb=0,
                                          component_policies=NO_DIFFUSERS)
    try:
        expected = full_pipe(prompt="a cat", num_inference_steps=4).images
    finally:
        for result in results.values():
            result.release()

    pipe = SyntheticPipeline()
    events = []
    with torch.no_grad():
        staged = run_staged(pipe, synthetic_stages(), client=client,
                            offload_kwargs={"environ": {}, "execution_device": "cpu",
                                            "small_tensor_threshold_kb": 0,
                                            "component_policies": NO_DIFFUSERS},
                            record_event=lambda name, seconds, **payload: events.append(name),
                            prompt="a cat", num_inference_steps=4)
    assert torch.equal(staged.images, expected)
    phases = [name for name in events if name.startswith("phase_")]
    assert phases == ["phase_prompt", "phase_denoise", "phase_decode", "phase_after_run"]
    # The transformer was set up in the denoising pass only, between its two phases.
    setup = events.index("setup_transformer_dynamic_offload")
    assert events.index("phase_denoise") < setup < events.index("phase_decode")
    # Everything was released: no session left, no state on the modules.
    from diffusers_dynamic_offloader._proto import sessions_pb2

    listed = client.rpc.unary("ListSessions", sessions_pb2.ListSessionsRequest()).sessions
    assert [s for s in listed if s.device_uuid] == []
    assert ddo.get_dynamic_offload_state(pipe.transformer) is None


def test_a_failing_pass_still_releases_everything(client):
    pipe = SyntheticPipeline()

    def broken_decode(pipe, latents, **_):
        raise RuntimeError("decode failed")

    stages = Stages(encode=synthetic_stages().encode, decode=broken_decode)
    try:
        run_staged(pipe, stages, client=client,
                   offload_kwargs={"environ": {}, "execution_device": "cpu",
                                   "component_policies": NO_DIFFUSERS}, prompt="x")
    except RuntimeError as error:
        assert "decode failed" in str(error)
    else:
        raise AssertionError("the decode error was swallowed")
    from diffusers_dynamic_offloader._proto import sessions_pb2

    listed = client.rpc.unary("ListSessions", sessions_pb2.ListSessionsRequest()).sessions
    assert [s for s in listed if s.device_uuid] == []


class DeviceInferringPipeline(SyntheticPipeline):
    """Infers its execution device as Diffusers does when no component is on the device:
    from an unrouted module on the host (here "meta", so that a wrong answer shows)."""

    @property
    def _execution_device(self):
        return torch.device("meta")

    def __call__(self, *args, **kwargs):
        self.calls.append(self._execution_device)
        return super().__call__(*args, **kwargs)


def test_each_pass_runs_on_the_execution_device_not_the_inferred_one(client):
    pipe = DeviceInferringPipeline()
    with torch.no_grad():
        run_staged(pipe, synthetic_stages(), client=client, execution_device="cpu",
                   offload_kwargs={"environ": {}, "component_policies": NO_DIFFUSERS},
                   prompt="a cat", num_inference_steps=2)
    assert pipe.calls == [torch.device("cpu"), "call"]
    # The pin ends with the run.
    assert type(pipe) is DeviceInferringPipeline
    assert pipe._execution_device == torch.device("meta")


def test_a_staged_run_asks_for_the_seeds_standby_purges(client):
    pipe = SyntheticPipeline()
    events = {}

    def record(name, seconds, **payload):
        events[name] = payload

    with torch.no_grad():
        # The auto preset (one_shot_fast) turns on the purge before the run and before the
        # transformer; ddod answers that it purges on Windows only.
        run_staged(pipe, synthetic_stages(), client=client, execution_device="cpu",
                   offload_kwargs={"environ": {}, "component_policies": NO_DIFFUSERS},
                   record_event=record, prompt="a cat", num_inference_steps=2)
    assert events["phase_prompt"]["purge_reason"] == "non_windows"
    assert events["phase_denoise"]["purge_reason"] == "non_windows"
    assert events["phase_decode"]["purge_reason"] == "disabled"
    with torch.no_grad():
        run_staged(SyntheticPipeline(), synthetic_stages(), client=client, execution_device="cpu",
                   offload_kwargs={"environ": {"DDO_PURGE_WINDOWS_STANDBY_BEFORE_RUN": "0"},
                                   "component_policies": NO_DIFFUSERS},
                   record_event=record, prompt="a cat", num_inference_steps=2)
    assert events["phase_prompt"]["purge_reason"] == "disabled"


class WanShapedPipeline(SyntheticPipeline):
    """WanPipeline's interface on the synthetic modules: ``encode_prompt`` with the negative
    prompt under classifier-free guidance, latents answered as ``frames``, and a VAE whose
    config carries the per-channel ``latents_mean`` and ``latents_std`` the decode undoes."""

    def __init__(self) -> None:
        super().__init__()
        self.vae = WanShapedVae()
        self.video_processor = types.SimpleNamespace(
            postprocess_video=lambda video, output_type: ("video", output_type, video))
        self.encoded = []

    def encode_prompt(self, prompt, negative_prompt=None, do_classifier_free_guidance=True,
                      num_videos_per_prompt=1, max_sequence_length=512):
        self.encoded.append((prompt, negative_prompt, do_classifier_free_guidance,
                             max_sequence_length))
        embeds = super().encode_prompt(prompt)
        negative = super().encode_prompt(negative_prompt or "-") if do_classifier_free_guidance \
            else None
        return embeds, negative

    @torch.no_grad()
    def __call__(self, prompt=None, negative_prompt=None, prompt_embeds=None,
                 negative_prompt_embeds=None, num_inference_steps=4, guidance_scale=5.0,
                 max_sequence_length=512, output_type="np"):
        # As WanPipeline: given embeddings under guidance, the negative ones must come too.
        assert prompt_embeds is None or guidance_scale <= 1.0 or negative_prompt_embeds is not None
        embeds = prompt_embeds if prompt_embeds is not None else self.encode_prompt(prompt)[0]
        latents = torch.zeros(1, 2, 3, 1, FEATURES // 2)  # (batch, z_dim, frames, h, w)
        for step in range(num_inference_steps):
            latents = latents + 0.01 * (step + 1) * embeds[:, : FEATURES // 2].view(1, 1, 1, 1, -1)
        if output_type == "latent":
            return types.SimpleNamespace(frames=latents)
        return types.SimpleNamespace(frames=self.vae.decode(latents * 2.0 + 1.0)[0])


class WanShapedVae(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(1))
        self.config = types.SimpleNamespace(z_dim=2, latents_mean=[1.0, 1.0],
                                            latents_std=[2.0, 2.0])

    @property
    def dtype(self):
        return self.scale.dtype

    def decode(self, latents, return_dict=False):
        return (latents * self.scale,)


def test_wan_stages_encode_with_the_negative_prompt_and_undo_the_latents_scaling(client):
    from diffusers_dynamic_offloader import wan_stages

    expected = WanShapedPipeline()(prompt="a fox", num_inference_steps=3).frames
    pipe = WanShapedPipeline()
    with torch.no_grad():
        kind, output_type, video = run_staged(
            pipe, wan_stages(), client=client, execution_device="cpu",
            offload_kwargs={"environ": {}, "component_policies": NO_DIFFUSERS},
            prompt="a fox", negative_prompt="blurry", num_inference_steps=3)
    # The pipeline's defaults: guidance 5.0 (so the negative prompt is encoded), 512 tokens,
    # output "np"; the decode applies latents * std + mean as WanPipeline does.
    assert pipe.encoded == [("a fox", "blurry", True, 512)]
    assert (kind, output_type) == ("video", "np")
    assert torch.allclose(video, expected)
