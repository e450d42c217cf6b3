"""Fixtures of the GPU tests: one ddod with the CUDA backend per test module, and a client.

ddod: DDO_DDOD_BINARY, else .bundle/bin/ddod, else build/bin/ddod (the bundle's lib/ beside
bin/ goes on ddod's LD_LIBRARY_PATH).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Iterator, Optional

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "client-python" / "src"))
sys.path.insert(0, str(REPO / "tests" / "python"))


def _find_ddod() -> Optional[Path]:
    named = os.environ.get("DDO_DDOD_BINARY")
    if named:
        return Path(named).resolve()
    for candidate in (REPO / ".bundle" / "bin" / "ddod", REPO / "build" / "bin" / "ddod"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def started_daemon(*extra_args: str) -> Iterator["object"]:
    """A ddod (CUDA backend) on a socket in a fresh temporary directory (the socket's
    directory, which tests may use too), with `extra_args`; stopped afterwards, which must
    succeed."""
    binary = _find_ddod()
    if binary is None:
        pytest.skip("no ddod binary: set DDO_DDOD_BINARY (or bundle one into .bundle with "
                    "tools/bundle.sh)")
    if not (binary.is_file() and os.access(binary, os.X_OK)):
        pytest.fail(f"DDO_DDOD_BINARY={binary} is not an executable file", pytrace=False)
    from support import start_ddod  # tests/python/support.py

    lib = binary.parent.parent / "lib"
    saved = os.environ.get("LD_LIBRARY_PATH")
    if lib.is_dir():
        os.environ["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [str(lib), saved]))
    work = tempfile.mkdtemp(prefix="ddo-s-", dir="/tmp")
    try:
        started = start_ddod(str(binary), os.path.join(work, "ddod.sock"),
                             os.path.join(work, "ddod.log"), "--state-dir",
                             os.path.join(work, "state"), "--discard", *extra_args)
    finally:
        if saved is None:
            os.environ.pop("LD_LIBRARY_PATH", None)
        else:
            os.environ["LD_LIBRARY_PATH"] = saved
    yield started
    code = started.terminate()
    log_tail = started.log()[-4000:]
    shutil.rmtree(work, ignore_errors=True)
    assert code == 0, f"ddod exited with {code} on SIGTERM; log tail:\n{log_tail}"


@pytest.fixture(scope="module")
def daemon() -> Iterator["object"]:
    """One ddod for this module (each test uses its own cache keys), CUDA backend."""
    yield from started_daemon()


@pytest.fixture(scope="module")
def client(daemon):
    from diffusers_dynamic_offloader import DdoClient

    with DdoClient.connect(daemon.address, timeout=60) as connected:
        from diffusers_dynamic_offloader._proto import info_pb2

        info = connected.info()
        if info.backend != info_pb2.BACKEND_CUDA:
            pytest.fail(f"ddod runs the {info_pb2.Backend.Name(info.backend)} backend on a CUDA "
                        f"machine: {info.backend_detail}", pytrace=False)
        yield connected


