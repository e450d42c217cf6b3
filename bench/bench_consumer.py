#!/usr/bin/env python3
"""The consumer machine (issue 33, item 4): a whole FLUX.1-dev pipeline (transformer, T5-XXL,
CLIP-L, VAE; random weights at the published configurations, bf16) on an 8 GiB VRAM cap
beside a 24 GiB RAM budget (a 32 GiB machine), DDO against every diffusers offloading mode,
time per image and host memory sampled, in one run.

The pipeline is written once as a Diffusers folder (``save_pretrained``: configs, safetensors,
word-level tokenizers, since the Hub's are out of reach), so that every mode starts from the
same files, as a user's runner does. Each mode runs in a fresh runner process:

- ``ddo``: ddod with ``--ram-budget-gb 24``; the runner builds the transformer and T5 with
  ``load_from_ddod(..., bind=False)`` (ddod reads the files; nothing of them in the runner),
  CLIP and the VAE with ``from_pretrained``, and runs ``run_staged`` (prompt, denoise, decode
  phases that move pool bytes between the components);
- ``group_disk``: each component loaded on its own and put on diffusers group offloading
  (block level, one block per group, streams) with ``offload_to_disk_path`` for the transformer
  and T5 (their bytes on disk, as a 32 GiB machine needs), CLIP and the VAE on the GPU;
- ``model_cpu``: ``enable_model_cpu_offload`` (the whole pipeline in RAM);
- ``sequential``: ``enable_sequential_cpu_offload``.

The runner caps its CUDA allocations (``set_per_process_memory_fraction``) at the VRAM cap;
for ``ddo`` at the activation reserve (``--activation-reserve-gb``, 3), while ddod plans its
slab and ring within ``DDO_VRAM_BUDGET_GB`` = the cap less that reserve: the two together stay
within the cap. Every mode decodes with the VAE's tiling on (what an 8 GiB card needs). Host memory is sampled every 50 ms: the runner's
RssAnon + RssShmem, plus ddod's RssAnon + RssShmem for ``ddo`` (the pool's pages are counted
once, in ddod; the page cache is not counted: it is reclaimable). A mode "fits the machine"
when its peak host memory is at most the RAM budget + 1 GiB (the issue's goal for DDO); a
diffusers mode that needs more would not complete on a 32 GiB machine, which is reported as
such (the device has more RAM, so it runs to its end here).

    LD_LIBRARY_PATH=.bundle/lib PYTHONPATH=.device-deps/src:client-python/src \\
      python3 bench/bench_consumer.py --ddod .bundle/bin/ddod --json-out consumer.json

``--pipeline wan`` runs Wan 2.1 T2V 14B with UMT5-XXL and the Wan VAE instead, a 17-frame
clip at 480x832 (``--frames``), guidance 5.0 (two transformer passes a step), with
``wan_stages``; the modes are the same (the text encoder on leaf-level group offloading, the
VAE on the GPU). ``--small`` builds small components (a quick check of the whole script).

``--storage fp8`` writes the denoiser in fp8 storage, as an fp8 checkpoint holds it (the text
encoder stays bf16: Diffusers' pipelines take the latents' dtype from the large text encoder's
parameters, so an fp8-stored T5 makes fp8 latents and ``randn`` fails in every mode, run 81): Diffusers' layerwise casting (weights in ``float8_e4m3fn``, computed in
bf16; norms, embeddings and the in/out projections stay bf16), saved as it stands, so each
safetensors file holds both dtypes. Every mode starts from those files as its users do: DDO's
runner with ``load_from_ddod(..., torch_dtype="auto")`` (ddod reads the fp8 bytes; nothing
widens them) and the same casting hooks, the diffusers modes with ``from_pretrained(...,
torch_dtype=bfloat16)`` (which widens the fp8 weights to bf16 in RAM) and then
``enable_layerwise_casting`` before their offloading, as Diffusers' documentation does. Give
the fp8 pipeline its own ``--dir``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO / "tests" / "gpu"))

GIB = 1 << 30
MODES = ("ddo", "group_disk", "model_cpu", "sequential")
STORAGES = ("bf16", "fp8")
PROMPT = "a painting of a squirrel eating a burger"

# Published configurations (FLUX.1-dev's model cards): CLIP-L, T5-XXL's encoder, FLUX's VAE.
CLIP_L = dict(vocab_size=49408, hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
              num_attention_heads=12, max_position_embeddings=77, projection_dim=768,
              hidden_act="quick_gelu")
T5_XXL = dict(vocab_size=32128, d_model=4096, d_ff=10240, d_kv=64, num_layers=24, num_heads=64,
              relative_attention_num_buckets=32, feed_forward_proj="gated-gelu",
              dropout_rate=0.0)
FLUX_VAE = dict(in_channels=3, out_channels=3, down_block_types=("DownEncoderBlock2D",) * 4,
                up_block_types=("UpDecoderBlock2D",) * 4, block_out_channels=(128, 256, 512, 512),
                layers_per_block=2, latent_channels=16, norm_num_groups=32, sample_size=1024,
                use_quant_conv=False, use_post_quant_conv=False, shift_factor=0.1159,
                scaling_factor=0.3611)
SMALL_T5 = dict(T5_XXL, d_model=1024, d_ff=2816, num_layers=4, num_heads=16)
SMALL_CLIP = dict(CLIP_L, num_hidden_layers=2)
# Wan 2.1 T2V 14B (bench/architectures.py, from diffusers' convert_wan_to_diffusers.py) with
# UMT5-XXL's encoder (google/umt5-xxl: T5-XXL's shape, a 256,384-token vocabulary) and the
# Wan VAE (AutoencoderKLWan's defaults are Wan 2.1's).
UMT5_XXL = dict(T5_XXL, vocab_size=256384)
SMALL_UMT5 = dict(SMALL_T5, vocab_size=32128)
SMALL_WAN = dict(num_layers=2, num_attention_heads=8, attention_head_dim=64, ffn_dim=1024,
                 text_dim=1024)

# What differs between the pipelines the run knows: the class names, which component is the
# large text encoder (loaded from ddod, leaf-level group offloading), which small ones sit
# on the GPU under group offloading, and the staged passes.
PIPELINES = {
    "flux": dict(pipeline="FluxPipeline", denoiser_class="FluxTransformer2DModel",
                 encoder="text_encoder_2", encoder_class="T5EncoderModel",
                 on_gpu=("text_encoder", "vae"), stages="flux_stages"),
    "wan": dict(pipeline="WanPipeline", denoiser_class="WanTransformer3DModel",
                encoder="text_encoder", encoder_class="UMT5EncoderModel", on_gpu=("vae",),
                stages="wan_stages"),
}


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


# ---------------------------------------------------------------------------------------------
# The pipeline folder.


def randomize(module, dtype) -> None:
    """normal(0, 0.02) weights in ``dtype``, filled where the module is (the GPU: fast)."""
    import torch

    module.to(dtype)
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.normal_(0.0, 0.02)


def fp8_storage(module) -> None:
    """Diffusers' layerwise casting of ``module``: weights stored in float8_e4m3fn, each layer
    computed in bf16 (a Diffusers model with its own skip patterns, others with Diffusers'
    defaults: norms, embeddings, the in/out projections stay bf16)."""
    import torch
    from diffusers.hooks import apply_layerwise_casting
    from diffusers.hooks.layerwise_casting import DEFAULT_SKIP_MODULES_PATTERN

    storage, compute = torch.float8_e4m3fn, torch.bfloat16
    if hasattr(module, "enable_layerwise_casting"):
        module.enable_layerwise_casting(storage_dtype=storage, compute_dtype=compute)
    else:
        # Also the modules transformers keeps in full precision (T5's `wo`): T5's feed-forward
        # casts its input to `wo.weight.dtype` before `wo`'s own hook runs, so an fp8 `wo`
        # would get an fp8 input (run 80).
        fp32_names = getattr(module, "_keep_in_fp32_modules", None) or ()
        kept = tuple(rf"(^|\.){name}$" for name in fp32_names)
        apply_layerwise_casting(module, storage_dtype=storage, compute_dtype=compute,
                                skip_modules_pattern=DEFAULT_SKIP_MODULES_PATTERN + kept)


def write_pipeline(folder: Path, small: bool, pipeline: str = "flux",
                   storage: str = "bf16") -> Dict[str, int]:
    """Builds the pipeline's components with random weights on the GPU and saves them as a
    Diffusers folder (the denoiser in fp8 storage with
    ``storage="fp8"``); returns each component's bytes."""
    import diffusers
    import torch
    import transformers

    import small_flux

    dtype = torch.bfloat16
    with torch.device("cuda"):
        if pipeline == "wan":
            from architectures import WAN21

            modules = dict(
                transformer=diffusers.WanTransformer3DModel(
                    **(dict(WAN21.config, **SMALL_WAN) if small else WAN21.config)),
                text_encoder=transformers.UMT5EncoderModel(
                    transformers.UMT5Config(**(SMALL_UMT5 if small else UMT5_XXL))),
                vae=diffusers.AutoencoderKLWan())
        else:
            modules = dict(
                transformer=diffusers.FluxTransformer2DModel(
                    **(small_flux.TRANSFORMER if small else {"guidance_embeds": True})),
                text_encoder=transformers.CLIPTextModel(
                    transformers.CLIPTextConfig(**(SMALL_CLIP if small else CLIP_L))),
                text_encoder_2=transformers.T5EncoderModel(
                    transformers.T5Config(**(SMALL_T5 if small else T5_XXL))),
                vae=diffusers.AutoencoderKL(**FLUX_VAE))
    for module in modules.values():
        randomize(module, dtype)
    if storage == "fp8":
        fp8_storage(modules["transformer"])
    if pipeline == "wan":
        # 480p: flow shift 3.0 (Wan 2.1's published setting for 480x832).
        pipe = diffusers.WanPipeline(
            scheduler=diffusers.FlowMatchEulerDiscreteScheduler(shift=3.0),
            tokenizer=small_flux.word_tokenizer(512), **modules)
    else:
        pipe = diffusers.FluxPipeline(
            scheduler=diffusers.FlowMatchEulerDiscreteScheduler(),
            tokenizer=small_flux.word_tokenizer(77), tokenizer_2=small_flux.word_tokenizer(512),
            **modules)
    pipe.save_pretrained(folder, safe_serialization=True)
    sizes = {name: sum(p.numel() * p.element_size() for p in module.parameters())
             for name, module in modules.items()}
    del pipe, modules
    gc.collect()
    torch.cuda.empty_cache()
    return sizes


# ---------------------------------------------------------------------------------------------
# The runner (one mode, in its own process).


class HostMemory:
    """Samples RssAnon + RssShmem of this process (and of ``other_pid``) every 50 ms."""

    def __init__(self, other_pid: Optional[int]) -> None:
        self.pids = [os.getpid()] + ([other_pid] if other_pid else [])
        self.peak = 0
        # Each process's own peak (the runner's, then ddod's): where the sum's bytes were.
        self.peaks = [0] * len(self.pids)
        # Each process's (RssAnon, RssShmem) at the moment of the sum's peak.
        self.split_at_peak: List[Dict[str, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    @staticmethod
    def resident(pid: int) -> Dict[str, int]:
        """The process's RssAnon and RssShmem, in bytes (zeros once it is gone)."""
        split = {"RssAnon": 0, "RssShmem": 0}
        try:
            with open(f"/proc/{pid}/status") as status:
                for line in status:
                    name, _, value = line.partition(":")
                    if name in split:
                        split[name] = int(value.split()[0]) * 1024
        except OSError:
            pass
        return split

    def _run(self) -> None:
        while not self._stop.is_set():
            splits = [self.resident(pid) for pid in self.pids]
            sizes = [sum(split.values()) for split in splits]
            if sum(sizes) > self.peak:
                self.peak = sum(sizes)
                self.split_at_peak = splits
            self.peaks = [max(peak, size) for peak, size in zip(self.peaks, sizes)]
            time.sleep(0.05)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        return self.peak


def call_arguments(args) -> Dict[str, Any]:
    import torch

    generator = torch.Generator("cuda").manual_seed(0)
    tokens = 64 if args.small else 512
    if args.pipeline == "wan":
        # A 17-frame clip at 480x832 (the issue's), guidance 5.0 (WanPipeline's default: each
        # step runs the transformer twice, with the prompt and the negative prompt).
        height, width, frames = (128, 128, 5) if args.small else (480, 832, args.frames)
        return dict(prompt=PROMPT, negative_prompt="blurry", height=height, width=width,
                    num_frames=frames, num_inference_steps=args.steps, guidance_scale=5.0,
                    max_sequence_length=tokens, output_type="pt", generator=generator)
    side = 512 if args.small else args.resolution
    return dict(prompt=PROMPT, height=side, width=side, num_inference_steps=args.steps,
                guidance_scale=3.5, max_sequence_length=tokens, output_type="pt",
                generator=generator)


def build_ddo(args, client):
    import diffusers
    import torch
    import transformers

    from diffusers_dynamic_offloader import load_from_ddod

    spec = PIPELINES[args.pipeline]
    folder = args.dir
    # The denoiser last: a load that needs room sends the components loaded before it, unused,
    # to their files, and the denoiser is the one worth the pool (run once a step). Loaded
    # first, the transformer went to its files for T5 and the first image read it back
    # (docs/benchmarks.md, run 76).
    # fp8 files hold two dtypes: each weight binds as stored ("auto"), then gets the same
    # casting hooks it was saved with.
    dtype = "auto" if args.storage == "fp8" else torch.bfloat16
    encoder = load_from_ddod(getattr(transformers, spec["encoder_class"]), folder,
                             subfolder=spec["encoder"], torch_dtype=dtype,
                             client=client, progress=False, bind=False).module
    transformer = load_from_ddod(getattr(diffusers, spec["denoiser_class"]), folder,
                                 subfolder="transformer", torch_dtype=dtype,
                                 client=client, progress=False, bind=False).module
    if args.storage == "fp8":
        fp8_storage(transformer)
    return getattr(diffusers, spec["pipeline"]).from_pretrained(
        folder, transformer=transformer, torch_dtype=torch.bfloat16, **{spec["encoder"]: encoder})


def build_group_disk(args):
    """Each large component loaded on its own and put on disk-backed group offloading before
    the next loads (a 32 GiB machine cannot hold both in RAM)."""
    import diffusers
    import torch
    import transformers
    from diffusers.hooks import apply_group_offloading

    spec = PIPELINES[args.pipeline]
    folder = args.dir
    options = dict(onload_device=torch.device("cuda"), offload_device=torch.device("cpu"),
                   offload_type="block_level", num_blocks_per_group=1, use_stream=True)
    transformer = getattr(diffusers, spec["denoiser_class"]).from_pretrained(
        folder, subfolder="transformer", torch_dtype=torch.bfloat16)
    if args.storage == "fp8":
        fp8_storage(transformer)  # before group offloading, as Diffusers' docs combine them
    apply_group_offloading(transformer, offload_to_disk_path=str(Path(args.work) / "gd-dit"),
                           **options)
    gc.collect()
    encoder = getattr(transformers, spec["encoder_class"]).from_pretrained(
        folder, subfolder=spec["encoder"], torch_dtype=torch.bfloat16)
    # T5's blocks sit below its top level (encoder.block), where block level finds none and
    # would onload the whole encoder as one group: leaf level, as diffusers' docs do for it.
    apply_group_offloading(encoder, offload_to_disk_path=str(Path(args.work) / "gd-te"),
                           **dict(options, offload_type="leaf_level", num_blocks_per_group=None))
    gc.collect()
    pipe = getattr(diffusers, spec["pipeline"]).from_pretrained(
        folder, transformer=transformer, torch_dtype=torch.bfloat16, **{spec["encoder"]: encoder})
    for name in spec["on_gpu"]:
        getattr(pipe, name).to("cuda")
    return pipe


def run_mode(args) -> Dict[str, Any]:
    import torch

    runner_cap = args.activation_reserve_gb if args.run == "ddo" else args.cap
    torch.cuda.set_per_process_memory_fraction(
        min(1.0, runner_cap * GIB / torch.cuda.get_device_properties(0).total_memory))
    memory = HostMemory(args.ddod_pid)
    result: Dict[str, Any] = {"mode": args.run, "storage": args.storage, "images_s": []}
    started = time.perf_counter()
    client = None
    if args.run == "ddo":
        from diffusers_dynamic_offloader import DdoClient

        client = DdoClient.connect(args.address, timeout=600)
        pipe = build_ddo(args, client)
    elif args.run == "group_disk":
        pipe = build_group_disk(args)
    else:
        import diffusers

        pipe = getattr(diffusers, PIPELINES[args.pipeline]["pipeline"]).from_pretrained(
            args.dir, torch_dtype=torch.bfloat16)
        if args.storage == "fp8":
            fp8_storage(pipe.transformer)
        if args.run == "model_cpu":
            pipe.enable_model_cpu_offload()
        else:
            pipe.enable_sequential_cpu_offload()
    pipe.set_progress_bar_config(disable=True)
    pipe.vae.enable_tiling()
    result["setup_s"] = time.perf_counter() - started
    pinned = 0
    events: List[Dict[str, Any]] = []
    result["events"] = events
    for image in range(args.images):
        began = time.perf_counter()

        def record_event(name: str, seconds: float, _image=image, _began=began, **payload: Any):
            # What each phase and route cost, and what the phase moved (the timeline of a run).
            moved = {k: v for k, v in payload.items() if k.endswith("_bytes") and v}
            events.append({"image": _image, "at_s": round(time.perf_counter() - _began, 3),
                           "event": name, "s": round(seconds, 3), **moved})

        with torch.no_grad():
            if client is not None:
                from diffusers_dynamic_offloader.seed_compat import staged

                stages = getattr(staged, PIPELINES[args.pipeline]["stages"])()
                staged.run_staged(pipe, stages, client=client, record_event=record_event,
                           offload_kwargs={"environ": {
                    "DDO_VRAM_BUDGET_GB": str(args.cap),
                    "DDO_ACTIVATION_RESERVE_GB": str(args.activation_reserve_gb)}},
                           **call_arguments(args))
                pinned = max(pinned, client.stats().pool.pinned_bytes)
            else:
                pipe(**call_arguments(args))
        torch.cuda.synchronize()
        result["images_s"].append(time.perf_counter() - began)
        log(f"{args.run}: image in {result['images_s'][-1]:.1f} s")
    result["host_peak_bytes"] = memory.stop()
    result["host_peak_bytes_by_process"] = dict(zip(("runner", "ddod"), memory.peaks))
    result["host_split_at_peak"] = dict(zip(("runner", "ddod"), memory.split_at_peak))
    result["device_peak_bytes"] = torch.cuda.max_memory_allocated()
    result["pinned_bytes"] = pinned
    if client is not None:
        result["spilled_bytes"] = client.stats().pool.spilled_bytes
        client.close()
    return result


# ---------------------------------------------------------------------------------------------
# The orchestration.


def run_in_process(args, mode: str, extra: List[str]) -> Dict[str, Any]:
    command = [sys.executable, __file__, "--run", mode, "--dir", str(args.dir), "--work",
               str(args.work), "--cap", str(args.cap), "--steps", str(args.steps), "--images",
               str(args.images), "--resolution", str(args.resolution),
               "--activation-reserve-gb", str(args.activation_reserve_gb), "--pipeline",
               args.pipeline, "--frames", str(args.frames), "--storage", args.storage, *extra]
    if args.small:
        command.append("--small")
    log(f"{mode}: {' '.join(command)}")
    started = time.perf_counter()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=args.mode_timeout)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result = json.loads(line[len("RESULT "):])
            result["completed"] = proc.returncode == 0
            return result
    return {"mode": mode, "completed": False, "wall_s": time.perf_counter() - started,
            "error": (proc.stderr or proc.stdout)[-2000:]}


def report(figures: Dict[str, Any], budget_gib: float) -> None:
    limit = (budget_gib + 1) * GIB
    ddo = figures["modes"].get("ddo", {})
    print(f"\nconsumer run: {figures['device']}, {figures['pipeline']} in {figures['storage']}, "
          f"VRAM cap {figures['cap_gib']} GiB, RAM budget {budget_gib} GiB; "
          f"{figures['steps']} steps an image")
    print(f"{'mode':<12}{'setup s':>9}{'image s':>9}{'vs ddo':>8}{'host GiB':>10}  fits")
    for mode, result in figures["modes"].items():
        if not result.get("completed"):
            print(f"{mode:<12} did not complete: {result.get('error', '')[-300:]}")
            continue
        image = result["images_s"][-1]
        ratio = image / ddo["images_s"][-1] if ddo.get("completed") else float("nan")
        fits = result["host_peak_bytes"] <= limit
        print(f"{mode:<12}{result['setup_s']:>9.1f}{image:>9.2f}{ratio:>8.2f}"
              f"{result['host_peak_bytes'] / GIB:>10.1f}  {'yes' if fits else 'no'}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ddod", help="the ddod binary (.bundle/bin/ddod)")
    parser.add_argument("--cap", type=float, default=8.0, help="VRAM cap in GiB (8)")
    parser.add_argument("--ram-budget-gb", type=float, default=24.0, help="ddod's (24)")
    parser.add_argument("--steps", type=int, default=4, help="denoising steps an image (4)")
    parser.add_argument("--images", type=int, default=2, help="images a mode (2: cold, warm)")
    parser.add_argument("--pipeline", choices=sorted(PIPELINES), default="flux",
                        help="FLUX.1-dev with T5-XXL (flux), or Wan 2.1 T2V 14B with UMT5-XXL "
                        "(wan)")
    parser.add_argument("--resolution", type=int, default=1024, help="FLUX's side (1024)")
    parser.add_argument("--frames", type=int, default=17, help="Wan's clip length (17)")
    parser.add_argument("--storage", choices=STORAGES, default="bf16",
                        help="the denoiser's and text encoder's stored dtype (see above)")
    parser.add_argument("--activation-reserve-gb", type=float, default=3.0,
                        help="of the cap, the DDO runner's own (3)")
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--dir", default="", help="the pipeline folder (written if empty)")
    parser.add_argument("--work", default="", help="scratch (sockets, disk offload)")
    parser.add_argument("--small", action="store_true", help="small components (a smoke run)")
    parser.add_argument("--mode-timeout", type=float, default=900.0)
    parser.add_argument("--json-out", default="")
    parser.add_argument("--ddod-log-out", default="", help="where ddod's whole log goes")
    parser.add_argument("--run", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--address", help=argparse.SUPPRESS)
    parser.add_argument("--ddod-pid", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.work = args.work or tempfile.mkdtemp(prefix="ddo-consumer-", dir="/tmp")

    if args.run:
        print("RESULT " + json.dumps(run_mode(args)), flush=True)
        return 0

    import torch

    from bench_flux_stream import Ddod

    args.dir = args.dir or str(Path(args.work) / "pipeline")
    figures: Dict[str, Any] = {"device": torch.cuda.get_device_name(0), "cap_gib": args.cap,
                               "ram_budget_gib": args.ram_budget_gb, "steps": args.steps,
                               "pipeline": args.pipeline, "storage": args.storage,
                               "modes": {}}
    if not (Path(args.dir) / "model_index.json").exists():
        started = time.perf_counter()
        figures["component_bytes"] = write_pipeline(Path(args.dir), args.small, args.pipeline,
                                                    args.storage)
        log(f"pipeline written in {time.perf_counter() - started:.0f} s: "
            f"{ {k: round(v / GIB, 2) for k, v in figures['component_bytes'].items()} } GiB")
    for mode in args.modes.split(","):
        if mode == "ddo":
            # A consumer machine's budget: the pool, ddod and the runner together.
            ddod = Ddod(args.ddod, Path(tempfile.mkdtemp(dir=args.work)),
                        ["--ram-budget-gb", f"{args.ram_budget_gb:g}",
                         "--ram-budget-scope", "runners"])
            try:
                result = run_in_process(args, mode, ["--address", ddod.address,
                                                     "--ddod-pid", str(ddod.proc.pid)])
            finally:
                ddod.stop()
                result.setdefault("ddod_log_tail", ddod.log_tail(1500))
                if args.ddod_log_out:
                    Path(args.ddod_log_out).write_text(ddod.log_tail(1 << 22))
        else:
            result = run_in_process(args, mode, [])
        figures["modes"][mode] = result
        log(f"{mode}: {json.dumps({k: v for k, v in result.items() if k != 'ddod_log_tail'})[:600]}")
    report(figures, args.ram_budget_gb)
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
