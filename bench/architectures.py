"""The transformer architectures bench_architectures.py measures: each published configuration,
the shapes users run and what the pipeline passes the transformer at one denoising step.

Every number names its source. "diffusers" means huggingface/diffusers at 58eb52c (2026-08-23,
0.40.0.dev0): the class defaults in src/diffusers/models/transformers/, the conversion scripts
in scripts/ (which write the published config.json of each Diffusers checkpoint) and each
pipeline's __call__ defaults in src/diffusers/pipelines/.

Token counts follow the pipelines: latent frames = (frames - 1) // temporal ratio + 1, latent
side = side // spatial ratio, then the transformer's patches. One forward per step is the
conditional pass; the pipelines with classifier-free guidance (all but FLUX.1-dev) run a second
one per step (batch 2, or a second call), which doubles compute but streams nothing more.

Only the shape arithmetic and the tables are pure Python (tested on any torch); the input
builders import torch and, for CogVideoX, diffusers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, Callable, Dict, Tuple


@dataclass(frozen=True)
class Shape:
    """One input size: an image (frames 1) or a video clip, and its text tokens."""

    name: str
    height: int
    width: int
    frames: int
    text_tokens: int
    note: str = ""


@dataclass(frozen=True)
class Architecture:
    """A Diffusers transformer class, its published configuration and its inputs."""

    name: str
    label: str
    class_name: str
    config: Dict[str, Any]
    #: The same layout with few blocks: --smoke runs every code path in seconds.
    smoke_config: Dict[str, Any]
    spatial_ratio: int  # the VAE's spatial compression
    temporal_ratio: int  # the VAE's temporal compression (1: images)
    patch: int
    patch_t: int
    shapes: Dict[str, Shape]
    default_shapes: Tuple[str, ...]
    smoke_shape: Shape
    #: (model, shape, device) -> the transformer's keyword arguments (return_dict=False).
    inputs: Callable[[Any, Shape, str], Dict[str, Any]] = field(repr=False, compare=False)
    #: Component names: one transformer, or Wan 2.2's two experts.
    experts: Tuple[str, ...] = ("transformer",)

    def latent(self, shape: Shape) -> Tuple[int, int, int]:
        """(frames, height, width) of the latent the pipeline makes for ``shape``."""
        for side in (shape.height, shape.width):
            if side % (self.spatial_ratio * self.patch):
                raise ValueError(f"{self.name}: {side} is not a multiple of "
                                 f"{self.spatial_ratio * self.patch} (VAE x patch)")
        frames = (shape.frames - 1) // self.temporal_ratio + 1 if self.temporal_ratio > 1 else 1
        return frames, shape.height // self.spatial_ratio, shape.width // self.spatial_ratio

    def tokens(self, shape: Shape) -> int:
        """Image or video tokens the transformer attends over (text tokens not included)."""
        frames, height, width = self.latent(shape)
        return (-(-frames // self.patch_t)) * (height // self.patch) * (width // self.patch)


def _generator(device: str):
    import torch

    return torch.Generator(device=device).manual_seed(1)


def _randn(generator, device: str, *size: int):
    import torch

    return torch.randn(*size, generator=generator, device=device, dtype=torch.bfloat16)


def _ones(device: str, *size: int):
    import torch

    return torch.ones(*size, device=device, dtype=torch.long)


def _timestep(device: str, value: float = 500.0):
    """A scheduler timestep as the pipelines pass it (``t.expand(batch)``, float32)."""
    import torch

    return torch.tensor([value], device=device, dtype=torch.float32)


# ---------------------------------------------------------------------------------------------
# Inputs per architecture: what each pipeline's denoising loop passes the transformer.


def flux_inputs(model, shape: Shape, device: str) -> Dict[str, Any]:
    # bench_flux_stream.make_inputs is FluxPipeline's call (packed 2x2 latents, img/txt ids).
    import bench_flux_stream as flux

    if shape.height != shape.width:
        raise ValueError("the FLUX inputs are square")
    return flux.make_inputs(shape.height, shape.text_tokens, device)


def wan_inputs(model, shape: Shape, device: str) -> Dict[str, Any]:
    # pipelines/wan/pipeline_wan.py: latents (B, 16, F, H, W) in the transformer's dtype,
    # timestep t.expand(B), prompt_embeds padded to max_sequence_length (B, 512, 4096).
    frames, height, width = WAN21.latent(shape)
    g = _generator(device)
    return {"hidden_states": _randn(g, device, 1, 16, frames, height, width),
            "timestep": _timestep(device),
            "encoder_hidden_states": _randn(g, device, 1, shape.text_tokens, 4096),
            "return_dict": False}


def qwen_inputs(model, shape: Shape, device: str) -> Dict[str, Any]:
    # pipelines/qwenimage/pipeline_qwenimage.py: packed latents (B, (H/16)(W/16), 64),
    # timestep / 1000, img_shapes [[(1, H/16, W/16)]], the prompt's embeds and mask (B, T, 3584),
    # guidance None (guidance_embeds False).
    _, height, width = QWEN_IMAGE.latent(shape)
    side_h, side_w = height // 2, width // 2
    g = _generator(device)
    return {"hidden_states": _randn(g, device, 1, side_h * side_w, 64),
            "encoder_hidden_states": _randn(g, device, 1, shape.text_tokens, 3584),
            "encoder_hidden_states_mask": _ones(device, 1, shape.text_tokens),
            "timestep": _timestep(device, 0.5),
            "img_shapes": [[(1, side_h, side_w)]],
            "return_dict": False}


def ltx_inputs(model, shape: Shape, device: str) -> Dict[str, Any]:
    # pipelines/ltx/pipeline_ltx.py (the transformer's call as LTXPipeline makes it; the
    # condition pipeline of 0.9.7/0.9.8 passes video_coords instead, same cost): packed latents
    # (B, F*H*W, 128) with patch 1, mask (B, 256), latent sizes, and rope_interpolation_scale
    # (temporal ratio / frame_rate 25, spatial ratio, spatial ratio).
    frames, height, width = LTX_VIDEO.latent(shape)
    g = _generator(device)
    return {"hidden_states": _randn(g, device, 1, frames * height * width, 128),
            "encoder_hidden_states": _randn(g, device, 1, shape.text_tokens, 4096),
            "timestep": _timestep(device),
            "encoder_attention_mask": _ones(device, 1, shape.text_tokens),
            "num_frames": frames, "height": height, "width": width,
            "rope_interpolation_scale": (LTX_VIDEO.temporal_ratio / 25,
                                         LTX_VIDEO.spatial_ratio, LTX_VIDEO.spatial_ratio),
            "return_dict": False}


def sd3_inputs(model, shape: Shape, device: str) -> Dict[str, Any]:
    # pipelines/stable_diffusion_3/pipeline_stable_diffusion_3.py: latents (B, 16, H/8, W/8),
    # prompt_embeds = CLIP-L/G 77 tokens + T5 256 (B, 333, 4096), pooled (B, 2048), t.expand(B).
    _, height, width = SD35_LARGE.latent(shape)
    g = _generator(device)
    return {"hidden_states": _randn(g, device, 1, 16, height, width),
            "encoder_hidden_states": _randn(g, device, 1, shape.text_tokens, 4096),
            "pooled_projections": _randn(g, device, 1, 2048),
            "timestep": _timestep(device),
            "return_dict": False}


def hunyuan_inputs(model, shape: Shape, device: str) -> Dict[str, Any]:
    # pipelines/hunyuan_video/pipeline_hunyuan_video.py: latents (B, 16, F, H, W), Llama embeds
    # padded to max_sequence_length 256 with their mask, CLIP pooled (B, 768), guidance
    # 6.0 * 1000 in the transformer's dtype, t.expand(B) in the latents' dtype (float32).
    import torch

    frames, height, width = HUNYUAN_VIDEO.latent(shape)
    g = _generator(device)
    return {"hidden_states": _randn(g, device, 1, 16, frames, height, width),
            "timestep": _timestep(device),
            "encoder_hidden_states": _randn(g, device, 1, shape.text_tokens, 4096),
            "encoder_attention_mask": _ones(device, 1, shape.text_tokens),
            "pooled_projections": _randn(g, device, 1, 768),
            "guidance": torch.tensor([6000.0], device=device, dtype=torch.bfloat16),
            "return_dict": False}


def cogvideox_inputs(model, shape: Shape, device: str) -> Dict[str, Any]:
    # pipelines/cogvideo/pipeline_cogvideox.py: latents (B, F, 16, H, W) (frames first), T5
    # embeds padded to 226, an integer timestep, and the 3-D rotary embeddings the pipeline makes
    # (its own _prepare_rotary_positional_embeddings, called on the transformer's config).
    import torch
    from diffusers.pipelines.cogvideo.pipeline_cogvideox import CogVideoXPipeline

    frames, height, width = COGVIDEOX_5B.latent(shape)
    g = _generator(device)
    pipeline_view = SimpleNamespace(vae_scale_factor_spatial=COGVIDEOX_5B.spatial_ratio,
                                    transformer=model)
    rotary = CogVideoXPipeline._prepare_rotary_positional_embeddings(
        pipeline_view, shape.height, shape.width, frames, torch.device(device))
    return {"hidden_states": _randn(g, device, 1, frames, 16, height, width),
            "encoder_hidden_states": _randn(g, device, 1, shape.text_tokens, 4096),
            "timestep": torch.tensor([500], device=device, dtype=torch.long),
            "image_rotary_emb": rotary,
            "return_dict": False}


# ---------------------------------------------------------------------------------------------
# The architectures. Sizes: bf16 parameter bytes as the benchmark prints them.

_IMAGE_1024 = Shape("1024px", 1024, 1024, 1, 512, "1024x1024 image")

FLUX_DEV = Architecture(
    name="flux", label="FLUX.1-dev", class_name="FluxTransformer2DModel",
    # The class defaults are FLUX.1-dev's config (19 double + 38 single blocks, 24 x 128 heads,
    # joint 4096, pooled 768); guidance_embeds=True is dev's (scripts/convert_flux_to_diffusers.py
    # sets it for "dev"). 11.9 B parameters.
    config={"guidance_embeds": True},
    smoke_config={"guidance_embeds": True, "num_layers": 1, "num_single_layers": 2},
    spatial_ratio=8, temporal_ratio=1, patch=2, patch_t=1,
    # FluxPipeline: 1024x1024 (default_sample_size 128 x VAE 8), T5 padded to
    # max_sequence_length=512.
    shapes={"1024px": _IMAGE_1024},
    default_shapes=("1024px",),
    smoke_shape=Shape("smoke", 256, 256, 1, 64),
    inputs=flux_inputs)

WAN21 = Architecture(
    name="wan2.1", label="Wan 2.1 T2V 14B", class_name="WanTransformer3DModel",
    # scripts/convert_wan_to_diffusers.py, "Wan-T2V-14B": 40 layers, 40 heads x 128 (dim 5120),
    # ffn 13824, in/out 16, text_dim 4096, freq_dim 256, patch (1, 2, 2),
    # qk_norm rms_norm_across_heads, cross_attn_norm, eps 1e-6: the class defaults.
    config={"num_layers": 40, "num_attention_heads": 40, "attention_head_dim": 128,
            "ffn_dim": 13824, "in_channels": 16, "out_channels": 16, "text_dim": 4096,
            "freq_dim": 256, "patch_size": (1, 2, 2), "qk_norm": "rms_norm_across_heads",
            "cross_attn_norm": True, "eps": 1e-6},
    smoke_config={"num_layers": 2},
    # WanPipeline: VAE 8x spatial, 4x temporal; 480x832, 81 frames; prompt padded to
    # max_sequence_length=512. 81 frames: 21x60x104 latent -> 21*30*52 = 32,760 tokens;
    # 17 frames: 5*30*52 = 7,800.
    spatial_ratio=8, temporal_ratio=4, patch=2, patch_t=1,
    shapes={"480p-81f": Shape("480p-81f", 480, 832, 81, 512, "480x832, 81 frames (default)"),
            "480p-17f": Shape("480p-17f", 480, 832, 17, 512, "480x832, 17-frame clip")},
    default_shapes=("480p-81f", "480p-17f"),
    smoke_shape=Shape("smoke", 128, 128, 5, 64),
    inputs=wan_inputs)

WAN22 = Architecture(
    name="wan2.2", label="Wan 2.2 T2V A14B (two experts)", class_name="WanTransformer3DModel",
    # scripts/convert_wan_to_diffusers.py, "Wan2.2-T2V-A14B": transformer (high-noise expert)
    # and transformer_2 (low-noise expert, from "low_noise_model") both use exactly the
    # Wan-T2V-14B config above; the pipeline switches at boundary_ratio 0.875. Each step runs
    # one expert: both live in ddod's pool, one session at a time.
    config=WAN21.config, smoke_config=WAN21.smoke_config,
    spatial_ratio=8, temporal_ratio=4, patch=2, patch_t=1,
    shapes=WAN21.shapes, default_shapes=WAN21.default_shapes, smoke_shape=WAN21.smoke_shape,
    inputs=wan_inputs, experts=("transformer", "transformer_2"))

QWEN_IMAGE = Architecture(
    name="qwen-image", label="Qwen-Image 20B", class_name="QwenImageTransformer2DModel",
    # The class defaults are Qwen/Qwen-Image's transformer config: 60 layers, 24 heads x 128
    # (3072), joint_attention_dim 3584 (Qwen2.5-VL 7B), in 64 (packed 2x2), out 16, patch 2,
    # axes_dims_rope (16, 56, 56), guidance_embeds False. About 20.4 B parameters.
    config={"num_layers": 60, "num_attention_heads": 24, "attention_head_dim": 128,
            "joint_attention_dim": 3584, "in_channels": 64, "out_channels": 16, "patch_size": 2,
            "axes_dims_rope": (16, 56, 56), "guidance_embeds": False},
    smoke_config={"num_layers": 2},
    spatial_ratio=8, temporal_ratio=1, patch=2, patch_t=1,
    # QwenImagePipeline: 1024x1024 (default_sample_size 128 x VAE 8). The prompt is not padded
    # (the embeds are the prompt's tokens after the 34-token template, at most 512): 128 text
    # tokens stand for a long prompt.
    shapes={"1024px": Shape("1024px", 1024, 1024, 1, 128, "1024x1024 image, 128 text tokens")},
    default_shapes=("1024px",),
    smoke_shape=Shape("smoke", 256, 256, 1, 64),
    inputs=qwen_inputs)

LTX_VIDEO = Architecture(
    name="ltx-13b", label="LTX-Video 13B (0.9.7/0.9.8 dev)", class_name="LTXVideoTransformer3DModel",
    # scripts/convert_ltx_to_diffusers.py get_transformer_config("0.9.7") (0.9.8 13B is the
    # same): 48 layers, 32 heads x 128 (4096), cross_attention_dim 4096, caption_channels 4096,
    # in/out 128, patch 1 x 1, gelu-approximate, qk_norm rms_norm_across_heads,
    # norm_elementwise_affine False, eps 1e-6, attention and out biases.
    config={"num_layers": 48, "num_attention_heads": 32, "attention_head_dim": 128,
            "cross_attention_dim": 4096, "caption_channels": 4096, "in_channels": 128,
            "out_channels": 128, "patch_size": 1, "patch_size_t": 1,
            "activation_fn": "gelu-approximate", "qk_norm": "rms_norm_across_heads",
            "norm_elementwise_affine": False, "norm_eps": 1e-6, "attention_bias": True,
            "attention_out_bias": True},
    smoke_config={"num_layers": 2},
    # LTXConditionPipeline: VAE 32x spatial, 8x temporal; 512x704, 161 frames, prompt padded
    # to max_sequence_length=256: 21x16x22 = 7,392 tokens. A 41-frame clip: 6*16*22 = 2,112.
    spatial_ratio=32, temporal_ratio=8, patch=1, patch_t=1,
    shapes={"512p-161f": Shape("512p-161f", 512, 704, 161, 256, "512x704, 161 frames (default)"),
            "512p-41f": Shape("512p-41f", 512, 704, 41, 256, "512x704, 41-frame clip")},
    default_shapes=("512p-161f", "512p-41f"),
    smoke_shape=Shape("smoke", 256, 256, 9, 64),
    inputs=ltx_inputs)

SD35_LARGE = Architecture(
    name="sd3.5-large", label="SD3.5 Large", class_name="SD3Transformer2DModel",
    # scripts/convert_sd3_to_diffusers.py for the 8B checkpoint: 38 joint blocks, heads =
    # num_layers = 38 x 64 (2432), caption_projection_dim 2432 (the hidden size),
    # joint_attention_dim 4096, pooled 2048 (class default), patch 2, in/out 16, sample 128,
    # pos_embed_max_size 192 ("sd3.0 and sd3.5 8b use 192"), qk_norm rms_norm (sd3.5), no
    # dual-attention layers (those are 3.5 Medium's). About 8.1 B parameters.
    config={"num_layers": 38, "num_attention_heads": 38, "attention_head_dim": 64,
            "caption_projection_dim": 2432, "joint_attention_dim": 4096,
            "pooled_projection_dim": 2048, "patch_size": 2, "in_channels": 16, "out_channels": 16,
            "sample_size": 128, "pos_embed_max_size": 192, "qk_norm": "rms_norm",
            "dual_attention_layers": ()},
    smoke_config={"num_layers": 2},
    # StableDiffusion3Pipeline: 1024x1024; CLIP 77 + T5 max_sequence_length 256 = 333 tokens.
    spatial_ratio=8, temporal_ratio=1, patch=2, patch_t=1,
    shapes={"1024px": Shape("1024px", 1024, 1024, 1, 333, "1024x1024 image, 77 + 256 text")},
    default_shapes=("1024px",),
    smoke_shape=Shape("smoke", 256, 256, 1, 64),
    inputs=sd3_inputs)

HUNYUAN_VIDEO = Architecture(
    name="hunyuan-video", label="HunyuanVideo 13B", class_name="HunyuanVideoTransformer3DModel",
    # The class defaults are scripts/convert_hunyuan_video_to_diffusers.py's
    # "HYVideo-T/2-cfgdistill" (hunyuanvideo-community/HunyuanVideo): 20 double + 40 single
    # blocks, 2 refiner blocks, 24 heads x 128 (3072), mlp 4.0, patch 2 x 1, in/out 16,
    # qk_norm rms_norm, guidance_embeds, text 4096, pooled 768, rope theta 256, axes (16,56,56).
    config={"num_layers": 20, "num_single_layers": 40, "num_refiner_layers": 2,
            "num_attention_heads": 24, "attention_head_dim": 128, "mlp_ratio": 4.0,
            "patch_size": 2, "patch_size_t": 1, "in_channels": 16, "out_channels": 16,
            "qk_norm": "rms_norm", "guidance_embeds": True, "text_embed_dim": 4096,
            "pooled_projection_dim": 768, "rope_theta": 256.0, "rope_axes_dim": (16, 56, 56)},
    smoke_config={"num_layers": 1, "num_single_layers": 2, "num_refiner_layers": 1},
    # HunyuanVideoPipeline: VAE 8x spatial, 4x temporal; 720x1280, 129 frames, Llama prompt
    # padded to 256: 33x90x160 latent -> 33*45*80 = 118,800 tokens (about 20 s a forward on one
    # H100: run it with few steps and caps). A 17-frame clip at 720p: 5*45*80 = 18,000.
    spatial_ratio=8, temporal_ratio=4, patch=2, patch_t=1,
    shapes={"720p-129f": Shape("720p-129f", 720, 1280, 129, 256, "720x1280, 129 frames (default)"),
            "720p-17f": Shape("720p-17f", 720, 1280, 17, 256, "720x1280, 17-frame clip")},
    default_shapes=("720p-17f",),
    smoke_shape=Shape("smoke", 128, 128, 5, 64),
    inputs=hunyuan_inputs)

COGVIDEOX_5B = Architecture(
    name="cogvideox-5b", label="CogVideoX-5B", class_name="CogVideoXTransformer3DModel",
    # scripts/convert_cogvideox_to_diffusers.py: "For 5B, num_layers is 42 ... num_attention_heads
    # is 48 ... use_rotary_positional_embeddings is True"; version 1.0's init kwargs: patch 2,
    # no temporal patch, patch bias, sample 60x90 (480x720 / 8), 49 frames; the class defaults
    # for the rest (64 per head: 3072, time_embed_dim 512, text_embed_dim 4096, 226 text tokens,
    # in/out 16, eps 1e-5). About 5.6 B parameters.
    config={"num_layers": 42, "num_attention_heads": 48, "attention_head_dim": 64,
            "use_rotary_positional_embeddings": True, "time_embed_dim": 512,
            "text_embed_dim": 4096, "in_channels": 16, "out_channels": 16, "patch_size": 2,
            "patch_size_t": None, "patch_bias": True, "sample_height": 60, "sample_width": 90,
            "sample_frames": 49, "max_text_seq_length": 226},
    smoke_config={"num_layers": 2},
    # CogVideoXPipeline: 480x720 (sample size x VAE 8), 49 frames (VAE 4x temporal), T5 padded
    # to 226: 13x60x90 latent -> 13*30*45 = 17,550 tokens. A 17-frame clip: 5*30*45 = 6,750.
    spatial_ratio=8, temporal_ratio=4, patch=2, patch_t=1,
    shapes={"480p-49f": Shape("480p-49f", 480, 720, 49, 226, "480x720, 49 frames (default)"),
            "480p-17f": Shape("480p-17f", 480, 720, 17, 226, "480x720, 17-frame clip")},
    default_shapes=("480p-49f", "480p-17f"),
    smoke_shape=Shape("smoke", 128, 128, 5, 64),
    inputs=cogvideox_inputs)

ARCHITECTURES: Dict[str, Architecture] = {a.name: a for a in (
    FLUX_DEV, WAN21, WAN22, QWEN_IMAGE, LTX_VIDEO, SD35_LARGE, HUNYUAN_VIDEO, COGVIDEOX_5B)}


def get(name: str) -> Architecture:
    try:
        return ARCHITECTURES[name]
    except KeyError:
        raise ValueError(f"unknown architecture {name!r}; known: "
                         f"{', '.join(ARCHITECTURES)}") from None


def model_class(architecture: Architecture):
    """The diffusers class (diffusers must be importable)."""
    import diffusers

    return getattr(diffusers, architecture.class_name)
