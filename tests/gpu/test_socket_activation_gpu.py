"""GPU only: a socket-activated ddod streams on cuda:0 (issue 16, item 2).

The test plays systemd (tests/python/support.py: activate_ddod binds ddod.socket's two sockets
and passes them at descriptors 3 and 4). Every connection reaches ddod through its accept loop
and grpc::AddInsecureChannelFromFd; the identity socket passes the segments, and CUDA IPC
handles reach the runner. The streamed outputs must be bitwise equal to the model run with all
its weights on the GPU, and the client must take the process that answered, not the listener,
for the daemon.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "client-python" / "src"))
sys.path.insert(0, str(REPO / "tests" / "python"))

import streaming_models as sm  # noqa: E402
from support import activate_ddod, systemd_sockets, wait_until  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
DEVICE = "cuda:0"


def test_a_socket_activated_ddod_streams_bitwise_equal_outputs():
    from diffusers_dynamic_offloader import DdoClient

    binary = os.environ.get("DDO_DDOD_BINARY", str(REPO / ".bundle" / "bin" / "ddod"))
    work = tempfile.mkdtemp(prefix="ddo-act-", dir="/tmp")
    sockets = systemd_sockets(work)
    daemon = activate_ddod(binary, work, sockets, "--state-dir", os.path.join(work, "state"),
                           "--discard")
    try:
        model = sm.make_model(torch.bfloat16, seed=0)
        reference = sm.reference_model(model, DEVICE)
        with DdoClient.connect(daemon.address, timeout=60) as client:
            assert client.daemon_info.pid == daemon.proc.pid
            assert client.daemon_uid == os.getuid()
            client.register_module("test/activated", model, progress=False)
            with client.stream(model, "test/activated", device=DEVICE,
                               settings=sm.stream_settings("linear")) as session:
                with torch.no_grad():
                    for index in range(3):
                        inputs = sm.make_inputs(index, torch.bfloat16, DEVICE)
                        assert torch.equal(model(**inputs), reference(**inputs)), index
                torch.cuda.synchronize()
                used = session.stats()["bytes_used"]
        assert used > 0
        assert "(socket from systemd)" in daemon.log(), daemon.log()
        print(f"[activation-gpu] streamed {used} B through a socket-activated ddod "
              f"(pid {daemon.proc.pid}); outputs bitwise equal")
    finally:
        code = daemon.terminate()
        for sock in sockets:
            sock.close()
        shutil.rmtree(work, ignore_errors=True)
    assert code == 0, daemon.log()
    assert wait_until(lambda: daemon.proc.poll() is not None, 5)
