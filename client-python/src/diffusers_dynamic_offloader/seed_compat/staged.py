"""Staged runs: a Diffusers pipeline in three passes with cleanup between them (the seed's
pattern, docs/seed.md "Phases, staged runs", as a library helper instead of hand-written runners).

1. **prompt**: the text encoders are routed (usually Diffusers group offload) and the prompt
   is encoded; their results are released;
2. **denoise**: the denoiser (transformer or UNet) is routed (usually streamed by ddod) and
   the pipeline runs with ``output_type="latent"``; released;
3. **decode**: the VAE is routed and the latents decoded; released.

Between passes :func:`~diffusers_dynamic_offloader.seed_compat.phases.enter_phase` releases the previous
pass's results, collects, and tells ddod what this pass and the next need (ddod frees the rest
and warms the next pass's weights). A full run (``enable_pipeline_offload`` then
``pipe(...)``) keeps everything routed at once; a staged run holds one pass's components at a
time.

How a pipeline encodes and decodes differs between pipeline classes, so the passes are given
as functions (:class:`Stages`); :func:`flux_stages` gives them for FluxPipeline, :func:`wan_stages` for WanPipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
import contextlib
import inspect
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence

import torch
from torch import nn

EventCallback = Callable[..., Any]


@dataclass
class Stages:
    """How to run one pipeline class in passes.

    Attributes:
        encode: ``encode(pipe, **call_kwargs) -> dict``: the keyword arguments that replace the
            prompt in the denoising call (``prompt_embeds=...`` and its kind).
        decode: ``decode(pipe, latents, **call_kwargs)``: the pipeline's output from latents.
        prompt: Component names the prompt pass uses.
        denoise: Component names the denoising pass uses.
        decoding: Component names the decoding pass uses.
        prompt_arguments: Call arguments that only the prompt pass reads (dropped from the
            denoising call, which gets embeddings instead).
    """

    encode: Callable[..., Dict[str, Any]]
    decode: Callable[..., Any]
    prompt: Sequence[str] = ("text_encoder", "text_encoder_2", "text_encoder_3")
    denoise: Sequence[str] = ("transformer", "unet")
    decoding: Sequence[str] = ("vae",)
    prompt_arguments: Sequence[str] = ("prompt", "prompt_2", "prompt_3", "negative_prompt",
                                       "negative_prompt_2", "negative_prompt_3",
                                       "max_sequence_length")


def run_staged(
    pipe: Any,
    stages: Stages,
    *,
    settings: Any = None,
    client=None,
    record_event: Optional[EventCallback] = None,
    offload_kwargs: Optional[Mapping[str, Any]] = None,
    execution_device: str = "cuda:0",
    offload_device: str = "cpu",
    **call_kwargs: Any,
) -> Any:
    """Runs ``pipe`` in the three passes of ``stages`` and returns what ``stages.decode``
    returns. ``settings`` (DynamicOffloadSettings) and ``offload_kwargs`` go to every
    ``enable_offload``; ``call_kwargs`` are the pipeline call's (prompt, steps, size, ...).
    Every component is released when the run ends, also when it raises."""
    from ..loaded_binding import loaded_key, unbind
    from .component_keys import default_cache_key, key_prefix
    from .offload_api import _client, _pipeline_components, enable_offload
    from .phases import enter_phase, standby_purge_requested

    client = _client(client)
    components = _pipeline_components(pipe, None)
    # Modules built by load_from_ddod hold no window on ddod's pool until their pass routes
    # them, so that ddod can move their bytes between the pool and their files.
    for module in components.values():
        unbind(module)
    routing = {"execution_device": execution_device, "offload_device": offload_device,
               **dict(offload_kwargs or {})}
    held: List[Any] = []

    def modules(names: Sequence[str]) -> Dict[str, nn.Module]:
        return {name: components[name] for name in names
                if isinstance(components.get(name), nn.Module)}

    # The components' default keys (their content hash: one pass over their bytes) for the
    # phases' hints, computed once a run and only where ddod holds a component of that class
    # and name (a warm slab to keep or fill); enable_offload stores under the same key.
    known: Dict[str, str] = {}
    held_keys = [component.cache_key for component in client.components()]

    def keys(names: Sequence[str]) -> List[str]:
        for name, module in modules(names).items():
            prefix = key_prefix(module, name)
            if name in known:
                continue
            if loaded_key(module) is not None:
                known[name] = loaded_key(module)  # built by load_from_ddod: its component
            elif any(key.startswith(prefix) for key in held_keys):
                known[name] = default_cache_key(module, name)
        return [known[name] for name in names if name in known]

    def route(names: Sequence[str]) -> None:
        for name, module in modules(names).items():
            result = enable_offload(module, component=name, settings=settings, client=client,
                                    record_event=record_event,
                                    **{"cache_key": known.get(name), **routing})
            held.append(result)
            if "cache_key" in result.event_payload:
                known[name] = result.event_payload["cache_key"]

    def phase(name: str, needed: Sequence[str], prefetch: Sequence[str],
              move_pool_bytes: bool = True) -> None:
        # Releasing a result gives back all it took: a streaming session, group offload
        # hooks, or a module moved to the device whole.
        released = list(held)
        held.clear()
        # The seed's purge switches of the moments this phase begins at (ddod answers
        # whether it purged: only on Windows).
        purge = standby_purge_requested(_SEED_PURGE_PHASES.get(name, ()), settings=settings,
                                        environ=routing.get("environ"), client=client)
        enter_phase(name, needed=keys(needed), prefetch=keys(prefetch), release=released,
                    purge_standby=purge, move_pool_bytes=move_pool_bytes, client=client,
                    record_event=record_event)

    try:
        with _executing_on(pipe, routing["execution_device"]):
            # The denoiser's weights are warmed while the prompt is encoded (and kept warm
            # after the run, for the next one, when ddod's budget allows).
            phase("prompt", stages.prompt, stages.denoise)
            route(stages.prompt)
            embeddings = stages.encode(pipe, **call_kwargs)
            phase("denoise", stages.denoise, stages.decoding)
            route(stages.denoise)
            # The denoising pass returns latents whatever output the caller asked for.
            denoise_call = {k: v for k, v in call_kwargs.items()
                            if k not in stages.prompt_arguments and k != "output_type"}
            latents = _latents_of(pipe(**denoise_call, **embeddings, output_type="latent"))
            # Nothing is prefetched for the next prompt: after_run, which follows, keeps the
            # denoiser's slab and would free the text encoders' (filling theirs here cost the
            # H100 consumer run 1 s an image, docs/benchmarks.md run 76), and under a RAM
            # budget their pool bytes would come back only into free room (run once, they
            # stream from their files as well; ddod keeps the denoiser's bytes in the pool).
            phase("decode", stages.decoding, ())
            route(stages.decoding)
            output = stages.decode(pipe, latents, **call_kwargs)
            # The denoiser's slab is kept warm; the host pool stays as decode left it (the
            # next prompt needs the text encoders first).
            phase("after_run", (), stages.denoise, move_pool_bytes=False)
            return output
    finally:
        while held:
            held.pop().release()


# The seed's standby-purge moments (DDO_PURGE_WINDOWS_STANDBY_<PHASE>) at which each phase
# of a staged run begins.
_SEED_PURGE_PHASES = {"prompt": ("before_run",),
                      "denoise": ("after_text_encoder", "before_transformer")}


def _latents_of(output: Any) -> Any:
    """The latents of a pipeline's ``output_type="latent"`` answer: image pipelines return
    them as ``images``, video pipelines as ``frames``, ``return_dict=False`` as a tuple."""
    for name in ("images", "frames"):
        if hasattr(output, name):
            return getattr(output, name)
    if isinstance(output, tuple):
        return output[0]
    return output


def _call_default(pipe: Any, name: str, fallback: Any) -> Any:
    """The default of the pipeline call's argument ``name`` (diffusers' own, where the
    signature has it)."""
    try:
        parameter = inspect.signature(type(pipe).__call__).parameters.get(name)
    except (TypeError, ValueError):
        return fallback
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return fallback
    return parameter.default


@contextlib.contextmanager
def _executing_on(pipe: Any, device: str) -> Iterator[None]:
    """Pins a Diffusers pipeline's ``_execution_device`` for the run. Diffusers infers it
    from group offload hooks or else from the first module component (the VAE in most
    pipelines); in a staged pass the other components sit unrouted on the host, so the
    inference would answer "cpu" and the pass would build its latents there."""
    cls = type(pipe)
    if not isinstance(getattr(cls, "_execution_device", None), property):
        yield
        return
    pinned = torch.device(device)
    pipe.__class__ = type(cls.__name__, (cls,), {
        "__module__": cls.__module__, "__doc__": cls.__doc__,
        "_execution_device": property(lambda self: pinned)})
    try:
        yield
    finally:
        pipe.__class__ = cls


def flux_stages() -> Stages:
    """The passes of diffusers' FluxPipeline: ``encode_prompt`` gives ``prompt_embeds`` and
    ``pooled_prompt_embeds``; the latents are unpacked, unscaled and decoded by the VAE."""

    def encode(pipe: Any, **call: Any) -> Dict[str, Any]:
        prompt_embeds, pooled, _text_ids = pipe.encode_prompt(
            prompt=call.get("prompt"), prompt_2=call.get("prompt_2"),
            max_sequence_length=call.get("max_sequence_length", 512),
            num_images_per_prompt=call.get("num_images_per_prompt", 1))
        return {"prompt_embeds": prompt_embeds, "pooled_prompt_embeds": pooled}

    def decode(pipe: Any, latents: Any, **call: Any) -> Any:
        height = call.get("height") or pipe.default_sample_size * pipe.vae_scale_factor
        width = call.get("width") or pipe.default_sample_size * pipe.vae_scale_factor
        latents = pipe._unpack_latents(latents, height, width, pipe.vae_scale_factor)
        latents = latents / pipe.vae.config.scaling_factor + pipe.vae.config.shift_factor
        vae_dtype = next(pipe.vae.parameters()).dtype
        image = pipe.vae.decode(latents.to(vae_dtype), return_dict=False)[0]
        return pipe.image_processor.postprocess(image, output_type=call.get("output_type", "pil"))

    return Stages(encode=encode, decode=decode)


def wan_stages() -> Stages:
    """The passes of diffusers' WanPipeline (Wan 2.1; Wan 2.2's second expert,
    ``transformer_2``, is routed in the denoising pass too): ``encode_prompt`` gives
    ``prompt_embeds`` and, under classifier-free guidance (``guidance_scale`` > 1, the
    pipeline's default 5.0), ``negative_prompt_embeds``; the latents are unscaled with the
    VAE's per-channel mean and std and decoded to frames, as WanPipeline does."""

    def encode(pipe: Any, **call: Any) -> Dict[str, Any]:
        guidance = call.get("guidance_scale", _call_default(pipe, "guidance_scale", 5.0))
        prompt_embeds, negative = pipe.encode_prompt(
            prompt=call.get("prompt"), negative_prompt=call.get("negative_prompt"),
            do_classifier_free_guidance=guidance > 1.0,
            num_videos_per_prompt=call.get("num_videos_per_prompt") or 1,
            max_sequence_length=call.get("max_sequence_length",
                                         _call_default(pipe, "max_sequence_length", 512)))
        embeddings = {"prompt_embeds": prompt_embeds}
        if negative is not None:
            embeddings["negative_prompt_embeds"] = negative
        return embeddings

    def decode(pipe: Any, latents: Any, **call: Any) -> Any:
        vae = pipe.vae
        latents = latents.to(vae.dtype)
        channels = (1, vae.config.z_dim, 1, 1, 1)
        mean = torch.tensor(vae.config.latents_mean).view(channels).to(latents.device,
                                                                       latents.dtype)
        inverse_std = 1.0 / torch.tensor(vae.config.latents_std).view(channels).to(
            latents.device, latents.dtype)
        video = vae.decode(latents / inverse_std + mean, return_dict=False)[0]
        return pipe.video_processor.postprocess_video(
            video, output_type=call.get("output_type", _call_default(pipe, "output_type", "np")))

    return Stages(encode=encode, decode=decode, prompt=("text_encoder",),
                  denoise=("transformer", "transformer_2"))
