"""bench/bench_architectures.py off the GPU: the token counts of every architecture's shapes,
the table's rows (bound, anchors measured under a smaller cap standing for larger ones) and
the command line's refusals. The measurements themselves run on the GPU machine
(docs/benchmarks.md names the commands)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

import architectures as archs  # noqa: E402
import bench_architectures as bench  # noqa: E402

GIB = 1 << 30


@pytest.mark.parametrize("name, shape, tokens, text", [
    ("flux", "1024px", 4096, 512),            # 128x128 latent, 2x2 patches; T5 at 512
    ("wan2.1", "480p-81f", 32760, 512),       # 21x60x104 latent, (1,2,2) patches
    ("wan2.1", "480p-17f", 7800, 512),        # 5x60x104
    ("wan2.2", "480p-81f", 32760, 512),
    ("qwen-image", "1024px", 4096, 128),
    ("ltx-13b", "512p-161f", 7392, 256),      # 21x16x22 (VAE 32x, 8x), patch 1
    ("ltx-13b", "512p-41f", 2112, 256),
    ("sd3.5-large", "1024px", 4096, 333),     # CLIP 77 + T5 256
    ("hunyuan-video", "720p-129f", 118800, 256),  # 33x90x160, 2x2 patches
    ("hunyuan-video", "720p-17f", 18000, 256),
    ("cogvideox-5b", "480p-49f", 17550, 226),  # 13x60x90, 2x2 patches
    ("cogvideox-5b", "480p-17f", 6750, 226),
])
def test_tokens_follow_the_pipelines_arithmetic(name, shape, tokens, text):
    architecture = archs.get(name)
    assert architecture.tokens(architecture.shapes[shape]) == tokens
    assert architecture.shapes[shape].text_tokens == text


def test_every_default_and_smoke_shape_fits_its_latent_grid():
    for architecture in archs.ARCHITECTURES.values():
        for name in architecture.default_shapes:
            assert architecture.tokens(architecture.shapes[name]) > 0
        assert architecture.tokens(architecture.smoke_shape) > 0


def test_a_side_off_the_latent_grid_is_refused():
    wan = archs.get("wan2.1")
    with pytest.raises(ValueError, match="not a multiple of 16"):
        wan.tokens(archs.Shape("odd", 472, 832, 81, 512))
    with pytest.raises(ValueError, match="unknown architecture 'wan3'"):
        archs.get("wan3")


def test_wan22_is_two_experts_of_the_wan21_config():
    assert archs.get("wan2.2").experts == ("transformer", "transformer_2")
    assert archs.get("wan2.2").config == archs.get("wan2.1").config


def _figures(anchor_block, anchor_leaf):
    return {
        "args": {"steps": 3, "warmup": 1},
        "model": {"label": "Test", "class": "X", "bytes": 20 * GIB, "experts": ["transformer"]},
        "shapes": {"s": {"note": "a shape", "tokens": 4096, "text_tokens": 512}},
        "h2d": {"gbps_median": 50.0},
        "compute": {"transformer": {"s": {"step_s": 0.2}}},
        "ddo": {"8.0": {"s": {"transformer": {"step_s": 0.4, "bitwise_equal": True,
                                              "stats": {"streamed_bytes_per_cycle": 15e9}}}},
                "16.0": {"s": {"transformer": {"step_s": 0.25, "bitwise_equal": True,
                                               "stats": {"streamed_bytes_per_cycle": 5e9}}}}},
        "diffusers": {"transformer": {"block_level": {"shapes": {"s": anchor_block}},
                                      "leaf_level": {"shapes": {"s": anchor_leaf}}}},
    }


def test_summary_bound_and_anchors_standing_for_larger_caps(capsys):
    block = {"8.0": {"cap_gib": 8.0, "step_s": 0.6, "bitwise_equal": True,
                     "stands_for_caps_up_to": 16.0}}
    leaf = {"8.0": {"cap_gib": 8.0, "error": "OOM: CUDA out of memory"},
            "12.0": {"cap_gib": 12.0, "step_s": 0.5, "stands_for_caps_up_to": 16.0}}
    figures = _figures(block, leaf)
    rows = bench.summarize(figures, [8.0, 12.0, 16.0], ["s"])
    by_cap = {row["cap_gib"]: row for row in rows}
    # bound = max(C, S/B): 15 GB / 50 GB/s = 0.3 s at 8 GiB; C = 0.2 s where S/B is 0.1 s.
    assert by_cap[8.0]["bound_s"] == pytest.approx(0.3)
    assert by_cap[16.0]["bound_s"] == pytest.approx(0.2)
    assert by_cap[8.0]["ddo_over_bound"] == pytest.approx(0.4 / 0.3)
    assert by_cap[12.0]["ddo_step_s"] is None  # no DDO figure at 12 GiB
    # block_level measured at 8 GiB stands for 12 and 16, marked as such.
    assert by_cap[8.0]["block_level_step_s"] == 0.6
    assert by_cap[8.0]["block_level_from_cap_gib"] is None
    assert by_cap[16.0]["block_level_step_s"] == 0.6
    assert by_cap[16.0]["block_level_from_cap_gib"] == 8.0
    # leaf_level did not fit at 8 GiB: its error there, its 12 GiB figure from 12 on.
    assert by_cap[8.0]["leaf_level_step_s"] is None
    assert "OOM" in by_cap[8.0]["leaf_level_error"]
    assert by_cap[12.0]["leaf_level_from_cap_gib"] is None
    assert by_cap[16.0]["leaf_level_step_s"] == 0.5
    assert by_cap[8.0]["best_diffusers_over_ddo"] == pytest.approx(0.6 / 0.4)
    assert by_cap[16.0]["best_diffusers_over_ddo"] == pytest.approx(0.5 / 0.25)

    bench.report(figures, [8.0, 12.0, 16.0], ["s"])
    printed = capsys.readouterr().out
    assert "0.600*" in printed and "OOM" in printed
    assert figures["summary"] == rows


def test_an_anchor_measured_at_every_cap_is_never_marked():
    block = {str(c): {"cap_gib": c, "step_s": 0.6} for c in (8.0, 16.0)}
    rows = bench.summarize(_figures(block, {}), [8.0, 16.0], ["s"])
    assert [row["block_level_from_cap_gib"] for row in rows] == [None, None]
    assert [row["leaf_level_step_s"] for row in rows] == [None, None]


def test_json_path():
    assert bench.json_path("x.json", "wan2.1", 1, "/out", False) == "x.json"
    assert bench.json_path("x.json", "wan2.1", 2, "/out", True) == "x-wan2.1.json"
    assert bench.json_path("", "wan2.1", 1, "/out", False) == "/out/arch-wan2.1.json"
    assert bench.json_path("", "flux", 8, "/out", True) == "/out/arch-flux-smoke.json"
    assert bench.json_path("", "flux", 1, "", False) == ""


@pytest.mark.parametrize("arguments, message", [
    (["--arch", "wan2.1,flux"], "one architecture per invocation"),
    (["--arch", "wan2.1", "--shapes", "1024px"], "wan2.1 has no shape '1024px'"),
    (["--arch", "wan9"], "unknown architecture 'wan9'"),
    (["--arch", "flux", "--caps", "8,-1"], "give positive GiB values"),
])
def test_command_line_refusals(arguments, message, tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / "bench_architectures.py"), *arguments,
                           "--ddod", sys.executable], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert message in done.stderr
