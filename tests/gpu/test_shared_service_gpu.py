"""A shared ddod on the GPU (issue 13): ddod runs as root like deploy/systemd/ddod.service
(--socket-group), and a runner of another user, a member of the group, asks to stream a module
on cuda:0. CUDA's interprocess events cannot be opened by another user (the first run of this
test failed inside the runner with cudaErrorMapBufferObjectFailed; bench/probes/
ipc_cross_user.py shows legacy memory handles and VMM descriptors work across users, events do
not), so ddod refuses the GPU session up front with a message that says what to do, and the
same runner still gets the shared copy on the host (attach) and streams on the host backend.

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
x = torch.randn(16, 1024, dtype=torch.bfloat16)
settings = {"DDO_SMALL_TENSOR_THRESHOLD_KB": "1", "DDO_RESIDENT_MODULE_BUDGET_GB": "0"}
outcome = {}
with DdoClient.connect("unix:" + SOCKET, allow_embedded=False) as client:
    outcome["daemon_uid"] = client.daemon_info.uid
    client.register_module("member/gpu-mlp", model)
    try:
        with client.stream(model, "member/gpu-mlp", device="cuda:0", settings=settings):
            pass
        outcome["gpu"] = "served"
    except Exception as error:
        outcome["gpu"] = f"{type(error).__name__}: {error}"
    attached = client.attach("member/gpu-mlp")
    outcome["attached"] = sorted(attached.tensors) == sorted(model.state_dict())
    attached.close()
    x_host = x.cpu().float()
    model_host = model.float()
    with torch.no_grad():
        expected_host = model_host(x_host)
    client.register_module("member/host-mlp", model_host)
    with client.stream(model_host, "member/host-mlp", device="cpu", settings=settings) as session:
        with torch.no_grad():
            outputs = [model_host(x_host) for _ in range(3)]
        outcome["host_uses"] = session.stats()["uses"]
    outcome["host_equal"] = all(torch.equal(o, expected_host) for o in outputs)
report(**outcome)
"""


def test_a_group_member_is_told_why_not_on_the_gpu_and_is_served_on_the_host(tmp_path):
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
        assert result["daemon_uid"] == 0
        assert "FAILED_PRECONDITION" in result["gpu"] or "streams on a GPU only" in result["gpu"], result
        assert "per-user ddod" in result["gpu"], result
        assert result["attached"], result
        assert result["host_uses"] > 0 and result["host_equal"], result
    finally:
        if daemon is not None:
            daemon.stop()
            daemon.remove_segments()
        shutil.rmtree(run_dir, ignore_errors=True)
        shutil.rmtree(state_dir, ignore_errors=True)
        assert not accounts.remove()
