"""A real diffusers FluxPipeline from small random-weight components, built without the Hub.

Every class is the real one (FluxTransformer2DModel, CLIPTextModel, T5EncoderModel,
AutoencoderKL, FlowMatchEulerDiscreteScheduler); only the sizes are small, and the tokenizers
are word-level tokenizers over a fixed vocabulary (the Hub's tokenizer files are out of reach
on the device machine). The transformer is large enough (about 1.2 GB in bf16) to stream
through a small resident budget, and the VAE decodes 512x512 images, so that the memory of
each phase is visible.
"""

from __future__ import annotations

from typing import Any, Dict

import torch

DEVICE = "cuda:0"
DTYPE = torch.bfloat16
# FLUX.1's layout with 12 heads of 128 (inner 1536), 4 double and 8 single blocks.
TRANSFORMER = dict(in_channels=64, num_layers=4, num_single_layers=8, attention_head_dim=128,
                   num_attention_heads=12, joint_attention_dim=1024, pooled_projection_dim=768,
                   guidance_embeds=True, axes_dims_rope=(16, 56, 56))
WORDS = "a painting of squirrel eating burger red cat on the moon at night".split()
PROMPT = "a painting of a squirrel eating a burger"
# One image: 512x512, 64 text tokens, three steps.
CALL = dict(prompt=PROMPT, height=512, width=512, num_inference_steps=3, guidance_scale=3.5,
            max_sequence_length=64, output_type="pt")


def word_tokenizer(model_max_length: int) -> Any:
    """A fast tokenizer with a word-level vocabulary (ids 0-2 are pad, unk and eos)."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:  # transformers 5 names the tokenizers-backed class differently
        from transformers import TokenizersBackend as PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<unk>": 1, "</s>": 2}
    for word in WORDS:
        vocab.setdefault(word, len(vocab))
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>",
                                   pad_token="<pad>", eos_token="</s>",
                                   model_max_length=model_max_length)


def components() -> Dict[str, Any]:
    """The pipeline's components on the CPU in bf16, the same weights on every call."""
    import diffusers
    import transformers

    torch.manual_seed(0)
    transformer = diffusers.FluxTransformer2DModel(**TRANSFORMER)
    torch.manual_seed(1)
    text_encoder = transformers.CLIPTextModel(transformers.CLIPTextConfig(
        vocab_size=1000, hidden_size=768, intermediate_size=3072, num_hidden_layers=4,
        num_attention_heads=12, max_position_embeddings=77, projection_dim=768,
        hidden_act="quick_gelu"))
    torch.manual_seed(2)
    text_encoder_2 = transformers.T5EncoderModel(transformers.T5Config(
        vocab_size=1000, d_model=1024, d_ff=2816, d_kv=64, num_layers=4, num_heads=16,
        relative_attention_num_buckets=32, feed_forward_proj="gated-gelu", dropout_rate=0.0))
    torch.manual_seed(3)
    vae = diffusers.AutoencoderKL(
        in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
        up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(128, 256, 512, 512),
        layers_per_block=2, latent_channels=16, norm_num_groups=32, sample_size=512,
        use_quant_conv=False, use_post_quant_conv=False, shift_factor=0.1159,
        scaling_factor=0.3611)
    modules = dict(transformer=transformer, text_encoder=text_encoder,
                   text_encoder_2=text_encoder_2, vae=vae)
    for module in modules.values():
        module.to(DTYPE).eval().requires_grad_(False)
    return dict(modules, tokenizer=word_tokenizer(77), tokenizer_2=word_tokenizer(512),
                scheduler=diffusers.FlowMatchEulerDiscreteScheduler())


def pipeline() -> Any:
    import diffusers

    pipe = diffusers.FluxPipeline(**components())
    pipe.set_progress_bar_config(disable=True)
    return pipe


def call() -> Dict[str, Any]:
    """The pipeline call, with a fresh generator: the same latents on every run."""
    return dict(CALL, generator=torch.Generator(DEVICE).manual_seed(0))


def transformer_inputs(device: str = DEVICE) -> Dict[str, Any]:
    """One denoising step's inputs for the transformer (a 512x512 image, 64 text tokens), the
    same on every device."""
    generator = torch.Generator(device=device).manual_seed(1)
    side, text = 32, 64
    img_ids = torch.zeros(side, side, 3, device=device)
    img_ids[..., 1] = torch.arange(side, device=device)[:, None]
    img_ids[..., 2] = torch.arange(side, device=device)[None, :]

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator, device=device, dtype=DTYPE)

    return dict(
        hidden_states=randn(1, side * side, 64), encoder_hidden_states=randn(1, text, 1024),
        pooled_projections=randn(1, 768), timestep=torch.tensor([0.5], device=device, dtype=DTYPE),
        img_ids=img_ids.reshape(side * side, 3), txt_ids=torch.zeros(text, 3, device=device),
        guidance=torch.tensor([3.5], device=device), return_dict=False)
