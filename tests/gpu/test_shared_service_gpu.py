"""A shared ddod on the GPU (issue 13): ddod runs as root like deploy/systemd/ddod.service
(--socket-group), and a runner of another user, a member of the group, streams a module on
cuda:0. Its segments, control block and doorbell reach it as descriptors (OPEN); the ring and
slab as CUDA IPC handles. The output must equal the all-GPU output.

Needs root (it creates a throwaway user and group, as tests/security does) and a GPU; skips
with the reason otherwise.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SECURITY = Path(__file__).resolve().parent.parent / "security"
sys.path.insert(0, str(SECURITY))

pytestmark = [
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root: it creates a throwaway user"),
]

RUNNER = """
import torch
from diffusers_dynamic_offloader import DdoClient
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Linear(1024, 1024) for _ in range(8)]).to(torch.bfloat16)
x = torch.randn(16, 1024, dtype=torch.bfloat16, device="cuda:0")
with torch.no_grad():
    expected = model.to("cuda:0")(x).cpu()
model.to("cpu")
try:
    with DdoClient.connect("unix:" + SOCKET, allow_embedded=False) as client:
        client.register_module("member/gpu-mlp", model)
        with client.stream(model, "member/gpu-mlp", device="cuda:0",
                           settings={"DDO_SMALL_TENSOR_THRESHOLD_KB": "1",
                                     "DDO_RESIDENT_MODULE_BUDGET_GB": "0"}) as session:
            with torch.no_grad():
                outputs = [model(x).cpu() for _ in range(3)]
            stats = session.stats()
    outcome = {"equal": all(torch.equal(o, expected) for o in outputs),
               "uses": stats["uses"], "daemon_uid": client.daemon_info.uid}
except Exception as error:
    outcome = {"error": f"{type(error).__name__}: {error}"}
report(**outcome)
"""


def test_a_group_member_streams_on_the_gpu_from_a_root_ddod(tmp_path):
    from security_support import Accounts, RootDaemon, random_suffix, run_as
    import grp

    binary = os.environ.get("DDO_DDOD_BINARY")
    if not binary:
        pytest.skip("DDO_DDOD_BINARY is not set")
    homes = tempfile.mkdtemp(prefix="ddo-gpu-homes-", dir="/tmp")
    os.chmod(homes, 0o755)
    accounts = Accounts(homes)
    run_dir = f"/run/ddo-gpu-{random_suffix()}"
    state_dir = tempfile.mkdtemp(prefix="ddo-gpu-state-", dir="/tmp")
    daemon = None
    try:
        group = accounts.group("ddogpug")
        member = accounts.user("ddogpum", extra_groups=[group])
        daemon = RootDaemon(os.path.abspath(binary), os.path.join(run_dir, "ddod.sock"),
                            grp.getgrgid(group).gr_name, state_dir,
                            os.path.join(state_dir, "ddod.log"))
        result = run_as(member, daemon.socket_path,
                        f"SOCKET = {daemon.socket_path!r}\n" + RUNNER, timeout=240)
        print(f"[shared-service-gpu] {result}")
        assert "error" not in result, f"{result}\nddod log:\n{daemon.log()[-3000:]}"
        assert result["daemon_uid"] == 0
        assert result["uses"] > 0, result
        assert result["equal"], result
    finally:
        if daemon is not None:
            daemon.stop()
            daemon.remove_segments()
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(state_dir, ignore_errors=True)
        assert not accounts.remove()
