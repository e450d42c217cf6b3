#!/usr/bin/env python3
"""What a runner is told (docs/pipelines.md, "What the runner is told"): eight 2048x2048 Linears
streamed on ddod's host backend with DDO_VERBOSE=1, three forward passes, then a component on
the `none` route. Uses the daemon DDO_DAEMON names, or starts a private one.

    PYTHONPATH=client-python/src DDO_DDOD_BINARY=build/bin/ddod /usr/bin/python3 examples/log_lines.py
"""

import logging

import torch
from torch import nn

import diffusers_dynamic_offloader as ddo

logging.basicConfig(level=logging.INFO, format="%(message)s")
torch.manual_seed(0)
model = nn.Sequential(*[nn.Linear(2048, 2048) for _ in range(8)])
result = ddo.enable_offload(model, component="transformer", execution_device="cpu",
                            environ={"DDO_VERBOSE": "1", "DDO_RESIDENT_MODULE_BUDGET_GB": "0.02"})
with torch.no_grad():
    for _ in range(3):
        model(torch.ones(4, 2048))
ddo.enable_offload(nn.Linear(8, 8), component="vae", execution_device="cpu", route="none",
                   environ={})
result.release()
