"""ExplainPlan and `ddoctl plan --explain` against a real ddod: a module's layout planned
without loading its weights."""

import os
import re
import subprocess

import torch

from diffusers_dynamic_offloader import DdoClient
from diffusers_dynamic_offloader.layout import write_layout
from streaming_support import DEPTH, LINEARS_PER_BLOCK, make_model
from support import ddoctl_path


def decisions(plan):
    return {decision.key: decision.value for decision in plan.decisions}


def test_a_module_is_planned_without_uploading_it(daemon):
    model = make_model(torch.float32)
    with DdoClient.connect(daemon.address) as client:
        plan = client.explain_plan(model, component="transformer",
                                   settings={"DDO_SMALL_TENSOR_THRESHOLD_KB": "0",
                                             "DDO_STREAM_UNIT": "block"})
        assert plan.route == "ddo_stream"
        assert decisions(plan)["stream_unit"] == "block"
        assert plan.ring_slots == 3
        assert client.components() == []  # nothing was uploaded

        text_encoder = client.explain_plan(model, component="text_encoder")
        assert text_encoder.route == "diffusers_group_offload"
        assert dict(text_encoder.group_offload_args)["offload_type"] == "leaf_level"


def test_ddoctl_plan_explains_a_layout_file(daemon, short_dir):
    path = os.path.join(short_dir, "layout.json")
    model = make_model(torch.float32)
    write_layout(model, path, component="transformer")
    result = subprocess.run(
        [ddoctl_path(), "--daemon", daemon.address, "plan", "--explain", path,
         "DDO_SMALL_TENSOR_THRESHOLD_KB=0", "DDO_AUTO_BUDGET_POLICY=off"],
        capture_output=True, text=True, timeout=30, env=dict(os.environ, DDO_DAEMON=""),
    )
    assert result.returncode == 0, result.stderr
    assert "route: ddo_stream" in result.stdout
    assert f"{DEPTH * LINEARS_PER_BLOCK} units" in result.stdout
    assert "resident_small" in result.stdout
    assert re.search(r"resident_budget_source +none", result.stdout), result.stdout

    bad = subprocess.run([ddoctl_path(), "--daemon", daemon.address, "plan", "--explain",
                          path, "DDO_STREAM_UNIT=layer"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1
    assert "DDO_STREAM_UNIT='layer'" in bad.stderr

