"""GPU only: the real PEFT and diffusers LoRA paths on a DDO-streamed FluxTransformer2DModel
(issue 14, items 1, 3 and 4).

The small FLUX transformer of small_flux.py (random bf16 weights, about 1.2 GB) streams through
ddod on cuda:0 with a small resident budget. Two LoRAs are made by PEFT from a random init
(``LoraConfig(init_lora_weights=False)``: B is not zero) on every attention and feed-forward
Linear and saved in diffusers' format (``FluxPipeline.save_lora_weights``, safetensors), then
loaded with ``transformer.load_lora_adapter`` before or after ``enable_offload``. Every output
is compared with the same transformer all on the GPU with the same adapters (the reference):

- unfused adapters (``set_adapters`` with weights, ``disable_lora`` / ``enable_lora``,
  ``delete_adapters``, two at once): bitwise equal. The streamed Linear runs ``F.linear`` on
  the same weight bytes as the reference (from the ring instead of a parameter), and PEFT's
  adapter branch runs the same kernels on the same device, so nothing changes the order of
  operations. No derived component appears and ddod's pool does not grow;
- ``fuse_lora`` / ``unfuse_lora`` with DDO_FUSED_LORA=on_arrival (the default): the adapters
  are added to each weight on the GPU as it arrives (fused_on_arrival.py), with PEFT's own
  operations: bitwise equal to the reference after each fuse; ``unfuse_lora`` gives the base
  back bit for bit (the reference's subtraction leaves rounding: within FUSED_TOLERANCE);
  nothing is stored in ddod, nothing uploaded; ``unload_lora`` after a fuse keeps the fused
  weights, and the released module holds them;
- ``fuse_lora`` / ``unfuse_lora`` with DDO_FUSED_LORA=stored: a derived version streams; equal within
  FUSED_TOLERANCE, because the fused weight of a streamed Linear is computed where its host
  copy lives (the delta, made on the GPU by PEFT, is added into the runner's host copy of the
  bf16 weight) while the reference adds it on the GPU: the same arithmetic in principle, but
  not guaranteed to round identically (bf16 add on the CPU may go through another
  accumulation width). The figures record whether it was bitwise anyway. ``unfuse_lora``
  gives the base weights back bit for bit (the output equals the one before any fuse), and
  fusing ``a`` again streams the version stored the first time, uploading nothing;
- ``load_state_dict`` of changed weights and the in-place edits of item 1: bitwise equal; the
  edits ddod cannot serve raise WeightEditError and change nothing. Every edit is counted.

Figures go to $DDO_GPU_REPORT_DIR/lora.json when set, and to stdout (pytest -s).

    DDO_DDOD_BINARY=.bundle/bin/ddod PYTHONPATH=.device-deps/src:client-python/src \\
      python3 -m pytest -s tests/gpu/test_lora_gpu.py
"""

from __future__ import annotations

import copy
import gc
from pathlib import Path
from typing import Any, Callable, Dict, List

import pytest
import torch
from torch import nn

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
diffusers = pytest.importorskip("diffusers")
pytest.importorskip("peft")

import gpu_report  # noqa: E402  (tests/gpu is on sys.path: conftest.py)
import small_flux  # noqa: E402

DEVICE = small_flux.DEVICE
RANK = 8
#: Every attention and feed-forward Linear of the double and single blocks (PEFT takes a
#: string as a regex that must match the whole module path).
LORA_TARGETS = (r".*transformer_blocks\.\d+\.(attn\.(to_q|to_k|to_v|to_out\.0|add_q_proj|"
                r"add_k_proj|add_v_proj|to_add_out)|ff\.net\.(0\.proj|2)|"
                r"ff_context\.net\.(0\.proj|2)|proj_mlp|proj_out)")
# Most of the transformer streams; the rest is resident in ddod's slab.
ROUTING = dict(environ={}, small_tensor_threshold_kb=0, resident_module_budget_gb=0.25)
# Fused LoRA only (see the module docstring): bf16 outputs of magnitude ~1.
FUSED_TOLERANCE = dict(rtol=2e-2, atol=2e-2)
STREAMED_WEIGHT = "transformer_blocks.0.attn.to_q.weight"
report = gpu_report.reporter("lora")


def settle() -> None:
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()


def run(model: nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(**small_flux.transformer_inputs())[0]


@pytest.fixture(scope="module")
def base() -> nn.Module:
    """The transformer on the CPU (bf16, the same weights on every call)."""
    torch.manual_seed(0)
    model = diffusers.FluxTransformer2DModel(**small_flux.TRANSFORMER)
    return model.to(small_flux.DTYPE).eval().requires_grad_(False)


def make_lora(base: nn.Module, directory: Path, seed: int) -> Path:
    """A LoRA made by PEFT from a random init on a copy of ``base``, saved as diffusers saves
    a pipeline's LoRA (``transformer.``-prefixed keys, safetensors)."""
    from peft import LoraConfig
    from peft.utils import get_peft_model_state_dict

    maker = copy.deepcopy(base)
    config = LoraConfig(r=RANK, lora_alpha=RANK, target_modules=LORA_TARGETS,
                        init_lora_weights=False)
    torch.manual_seed(seed)
    maker.add_adapter(config, adapter_name="made")
    state = get_peft_model_state_dict(maker, adapter_name="made")
    assert state and all(value.abs().sum() > 0 for value in state.values())
    diffusers.FluxPipeline.save_lora_weights(directory, transformer_lora_layers=state)
    del maker
    return directory / "pytorch_lora_weights.safetensors"


@pytest.fixture(scope="module")
def lora_files(base, tmp_path_factory) -> Dict[str, Path]:
    files = {}
    for name, seed in (("a", 1), ("b", 2)):
        files[name] = make_lora(base, tmp_path_factory.mktemp(f"lora-{name}"), seed)
    report("lora_file_bytes", {name: path.stat().st_size for name, path in files.items()})
    return files


def load_adapters(model: nn.Module, files: Dict[str, Path], names=("a", "b")) -> None:
    for name in names:
        model.load_lora_adapter(str(files[name].parent), weight_name=files[name].name,
                                prefix="transformer", adapter_name=name)


def offload(model: nn.Module, client, key: str, fused_lora: str = "on_arrival"):
    from diffusers_dynamic_offloader import enable_offload

    routing = dict(ROUTING, environ={"DDO_FUSED_LORA": fused_lora})
    result = enable_offload(model, route="dynamic_offload", execution_device=DEVICE,
                            cache_key=key, client=client, **routing)
    assert result.route == "dynamic_offload" and result.hook is not None
    return result


def derived_of(client, key: str) -> List[str]:
    return [c.cache_key for c in client.components() if getattr(c, "base_cache_key", "") == key]


def adapters_off_device(model: nn.Module) -> List[str]:
    return [name for name, p in model.named_parameters()
            if "lora_" in name and p.device != torch.device(DEVICE)]


def lora_layer_count(model: nn.Module) -> int:
    from peft.tuners.lora import LoraLayer

    return sum(isinstance(module, LoraLayer) for module in model.modules())


UNFUSED_STEPS: Dict[str, Callable[[nn.Module], None]] = {
    "set_adapters(['a', 'b'])": lambda m: m.set_adapters(["a", "b"]),
    "set_adapters('b')": lambda m: m.set_adapters("b"),
    "set_adapters(['a', 'b'], [0.5, 1.5])": lambda m: m.set_adapters(["a", "b"], [0.5, 1.5]),
    "disable_lora()": lambda m: m.disable_lora(),
    "enable_lora()": lambda m: m.enable_lora(),
    "delete_adapters('a')": lambda m: m.delete_adapters("a"),
}


@pytest.mark.parametrize("when", ["before", "after"], ids=["loaded-before", "loaded-after"])
def test_unfused_adapters_are_bitwise_the_all_gpu_models(client, base, lora_files, when):
    key = f"test/lora-unfused-{when}"
    reference = copy.deepcopy(base).to(DEVICE)
    load_adapters(reference, lora_files)
    model = copy.deepcopy(base)
    if when == "before":
        load_adapters(model, lora_files)
    result = offload(model, client, key)
    try:
        if when == "after":
            load_adapters(model, lora_files)
        reserved = client.stats().pool.reserved_bytes
        base_output = run(reference)
        run(model)  # PEFT put the adapters of streamed layers beside their host weights
        assert adapters_off_device(model) == [], (
            f"adapter weights not on {DEVICE} after a forward: {adapters_off_device(model)[:5]}")
        outputs = {}
        for step, apply in UNFUSED_STEPS.items():
            apply(model)
            apply(reference)
            ours, expected = run(model), run(reference)
            outputs[step] = (ours - expected).abs().max().item()
            assert torch.equal(ours, expected), (
                f"{step}: max abs difference {outputs[step]:.3g} from the all-GPU model")
            assert result.hook.cache_key == key, f"{step} made a derived version"
        report(f"unfused_{when}_max_abs_difference", outputs)
        assert result.hook.stats()["streamed_uses"] > 0
        assert derived_of(client, key) == []
        assert client.stats().pool.reserved_bytes == reserved, "ddod's pool grew"
        assert not torch.equal(run(model), base_output), "the adapters changed nothing"
    finally:
        result.release()
        del reference
        settle()


def test_fused_lora_is_added_on_arrival(client, base, lora_files):
    key = "test/lora-on-arrival"
    reference = copy.deepcopy(base).to(DEVICE)
    load_adapters(reference, lora_files)
    model = copy.deepcopy(base)
    result = offload(model, client, key)
    try:
        load_adapters(model, lora_files)
        reserved = client.stats().pool.reserved_bytes
        unfused = run(reference)
        # The reference's unfuse subtracts its delta again (rounding stays behind): it gets
        # its saved weights back after each, so that every fuse starts from the same base.
        saved = {name: value.clone() for name, value in reference.state_dict().items()}
        layers = lora_layer_count(model)
        figures = {}
        steps = (("fuse_lora(a)", lambda m: m.fuse_lora(adapter_names=["a"])),
                 ("unfuse_lora()", lambda m: m.unfuse_lora()),
                 ("fuse_lora(b)", lambda m: m.fuse_lora(adapter_names=["b"])),
                 ("unfuse_lora() again", lambda m: m.unfuse_lora()),
                 ("fuse_lora(a, lora_scale=0.5)",
                  lambda m: m.fuse_lora(adapter_names=["a"], lora_scale=0.5)))
        for step, apply in steps:
            apply(model)
            apply(reference)
            ours, expected = run(model), run(reference)
            stats = result.hook.stats()
            figures[step] = {"max_abs_difference": (ours - expected).abs().max().item(),
                             "bitwise": torch.equal(ours, expected),
                             "linears_fused_on_arrival": stats["linears_fused_on_arrival"]}
            if step.startswith("fuse"):
                assert torch.equal(ours, expected), (step, figures[step])
                assert not torch.equal(ours, unfused), f"{step} changed nothing"
                assert stats["linears_fused_on_arrival"] == layers, (step, stats, layers)
            else:
                # Back to the base bit for bit; the reference subtracted its delta again.
                assert torch.equal(ours, unfused), (step, figures[step])
                torch.testing.assert_close(ours, expected, **FUSED_TOLERANCE)
                assert stats["linears_fused_on_arrival"] == 0, stats
                reference.load_state_dict(saved)
            assert result.hook.cache_key == key and derived_of(client, key) == []
        stats = result.hook.stats()
        assert stats["edit_syncs"] == 0 and stats["uploaded_edit_bytes"] == 0, stats
        assert client.stats().pool.reserved_bytes == reserved, "ddod's pool grew"
        # diffusers' unload after a fuse: the LoRA layers go, the fused weights stay.
        fused_output = run(model)
        model.unload_lora()
        reference.unload_lora()
        assert torch.equal(run(model), fused_output)
        assert torch.equal(run(model), run(reference))
        state = {name: value for name, value in model.state_dict().items()
                 if name == STREAMED_WEIGHT}
        assert torch.equal(state[STREAMED_WEIGHT].to(DEVICE),
                           reference.state_dict()[STREAMED_WEIGHT]), "state_dict() is not fused"
        result.release()
        result = None
        model.to(DEVICE)
        assert torch.equal(run(model), run(reference)), "the released module lost the fuse"
        report("fused_on_arrival", figures)
    finally:
        if result is not None:
            result.release()
        del reference, model
        settle()


def test_fused_lora_stored_streams_a_derived_version(client, base, lora_files):
    key = "test/lora-fused"
    reference = copy.deepcopy(base).to(DEVICE)
    load_adapters(reference, lora_files)
    model = copy.deepcopy(base)
    result = offload(model, client, key, fused_lora="stored")
    try:
        load_adapters(model, lora_files)
        unfused = run(reference)
        layers = lora_layer_count(model)
        figures, keys = {}, []
        steps = (("fuse_lora(a)", lambda m: m.fuse_lora(adapter_names=["a"])),
                 ("unfuse_lora()", lambda m: m.unfuse_lora()),
                 ("fuse_lora(b)", lambda m: m.fuse_lora(adapter_names=["b"])),
                 ("unfuse_lora() again", lambda m: m.unfuse_lora()),
                 ("fuse_lora(a) again", lambda m: m.fuse_lora(adapter_names=["a"])))
        for step, apply in steps:
            apply(model)
            apply(reference)
            ours, expected = run(model), run(reference)
            figures[step] = {"max_abs_difference": (ours - expected).abs().max().item(),
                             "bitwise": torch.equal(ours, expected),
                             "last_sync": dict(result.hook.last_sync or {})}
            torch.testing.assert_close(ours, expected, **FUSED_TOLERANCE)
            keys.append(result.hook.cache_key)
            if step.startswith("fuse"):
                assert not torch.equal(ours, unfused), f"{step} changed nothing"
                assert result.hook.cache_key != key and result.hook.base_cache_key == key
                assert result.hook.last_sync["changed_tensors"] == layers, (
                    step, layers, result.hook.last_sync)
            else:
                # Unfused, the base streams again, bit for bit (edit_lineage.py's undo).
                assert result.hook.cache_key == key, (step, result.hook.cache_key)
                assert torch.equal(ours, unfused), (step, (ours - unfused).abs().max().item())
        report("fused", figures)
        assert keys[0] != keys[2]
        assert keys[4] == keys[0], "fusing a again did not stream the version stored before"
        assert figures["fuse_lora(a) again"]["last_sync"]["uploaded_bytes"] == 0
        assert set(derived_of(client, key)) >= {keys[0], keys[2]}
    finally:
        result.release()
        del reference
        settle()


# Item 1 on the GPU: the edits that work, then those refused, on one streamed model.


def _host_values(parameter: torch.Tensor, seed: int) -> torch.Tensor:
    values = torch.randn(parameter.shape, generator=torch.Generator().manual_seed(seed)) * 0.02
    return values.to(parameter.dtype).to(parameter.device)


def _data_iadd(p: torch.Tensor) -> None:
    p.data += _host_values(p, 10)


def _setitem(p: torch.Tensor) -> None:
    p[0] = 1


def _no_grad_mul(p: torch.Tensor) -> None:
    with torch.no_grad():
        p.mul_(2)


IN_PLACE_EDITS: Dict[str, Callable[[torch.Tensor], Any]] = {
    "p.data.mul_(2)": lambda p: p.data.mul_(2),
    "no_grad p.mul_(2)": _no_grad_mul,
    "p.data += d": _data_iadd,
    "p.copy_(t)": lambda p: p.copy_(_host_values(p, 11)),
    "p[0] = 1": _setitem,
    "nn.init.zeros_(p)": lambda p: nn.init.zeros_(p),
    "torch.add(a, b, out=p)":
        lambda p: torch.add(_host_values(p, 12), _host_values(p, 13), out=p),
}
EDIT_TARGETS = (STREAMED_WEIGHT, "transformer_blocks.0.attn.to_q.bias",
                "single_transformer_blocks.1.proj_mlp.weight", "x_embedder.weight",
                "transformer_blocks.1.attn.norm_q.weight")


def _load_changed(model: nn.Module) -> None:
    state = model.state_dict()
    changed = {name: state[name].clone() * 0.5 for name in (
        "transformer_blocks.1.attn.to_k.weight", "single_transformer_blocks.0.proj_out.weight",
        "transformer_blocks.1.ff.net.2.bias")}
    model.load_state_dict(changed, strict=False)


REFUSED = {
    "module.to(torch.float16)": lambda m: m.to(torch.float16),
    "module.half()": lambda m: m.half(),
    "module.to('meta')": lambda m: m.to("meta"),
    "p.requires_grad_(True)": lambda m: m.get_parameter(STREAMED_WEIGHT).requires_grad_(True),
}


def test_weight_edits_on_the_gpu_work_or_are_refused_and_never_crash(client, base):
    from diffusers_dynamic_offloader import WeightEditError

    key = "test/lora-edits"
    reference = copy.deepcopy(base).to(DEVICE)
    model = copy.deepcopy(base)
    result = offload(model, client, key)
    outcomes: Dict[str, str] = {}
    try:
        ours, expected = run(model), run(reference)
        assert torch.equal(ours, expected), (
            f"before any edit, the streamed transformer is not bitwise the all-GPU one (max abs "
            f"difference {(ours - expected).abs().max().item():.3g}): every comparison below "
            f"would fail for that reason")
        for target in EDIT_TARGETS:
            for edit, apply in IN_PLACE_EDITS.items():
                name = f"{edit} on {target}"
                apply(model.get_parameter(target))
                with torch.no_grad():
                    apply(reference.get_parameter(target))
                ours, expected = run(model), run(reference)
                assert torch.equal(ours, expected), (
                    f"{name}: max abs difference {(ours - expected).abs().max().item():.3g}")
                outcomes[name] = "worked"
        _load_changed(model)
        _load_changed(reference)
        assert torch.equal(run(model), run(reference)), "load_state_dict(strict=False)"
        outcomes["load_state_dict(strict=False) of changed weights"] = "worked"
        assert result.hook.cache_key != key and result.hook.base_cache_key == key
        before = run(model)
        for name, apply in REFUSED.items():
            with pytest.raises(WeightEditError) as refused:
                apply(model)
            outcomes[name] = "refused"
            report(f"refusal {name}", str(refused.value))
            assert torch.equal(run(model), before), f"the module computes otherwise after {name}"
        report("gpu_weight_edits", f"{len(outcomes)} run, 0 crashed, "
               f"{sum(o == 'worked' for o in outcomes.values())} worked, "
               f"{sum(o == 'refused' for o in outcomes.values())} refused")
    finally:
        report("gpu_weight_edit_outcomes", outcomes)
        result.release()
        del reference
        settle()
    # Released: ordinary private tensors with the edits kept.
    for name, parameter in model.named_parameters():
        assert type(parameter) is nn.Parameter, name
    model.get_parameter(STREAMED_WEIGHT).data.mul_(1.5)
