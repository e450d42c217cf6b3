"""The C++ client's RPC half (client-cpp, ddo::RpcClient) against a real ddod: runs the gtest
binary ddo_client_rpc_tests (beside DDO_DDOD_BINARY, or DDO_CLIENT_RPC_TESTS_BINARY), which
starts its own ddod, as tests/python/test_ddoctl_cli.py runs ddoctl. Also holds the C++ copy of
the daemon-only variables equal to the Python client's table."""

import os
import re
import subprocess
from pathlib import Path

import pytest

from diffusers_dynamic_offloader import embedded

ROOT = Path(__file__).resolve().parents[2]
CPP_TABLE = ROOT / "client-cpp" / "src" / "rpc" / "daemon_only_variables.h"


def _tests_binary() -> str:
    explicit = os.environ.get("DDO_CLIENT_RPC_TESTS_BINARY")
    if explicit:
        return explicit
    return os.path.join(os.path.dirname(os.environ.get("DDO_DDOD_BINARY", "build/bin/ddod")),
                        "ddo_client_rpc_tests")


def test_the_daemon_only_variables_are_one_table():
    body = CPP_TABLE.read_text().split("kDaemonOnlyVariables[] = {", 1)[1].split("};", 1)[0]
    cpp = re.findall(r'"(DDO_[A-Z0-9_]+)"', body)
    assert len(cpp) == len(set(cpp)), "a name appears twice in the C++ table"
    assert set(cpp) == set(embedded.DAEMON_ONLY_VARIABLES), (
        f"client-cpp/src/rpc/daemon_only_variables.h and embedded.py's DAEMON_ONLY_VARIABLES "
        f"differ: only C++ {sorted(set(cpp) - embedded.DAEMON_ONLY_VARIABLES)}, only Python "
        f"{sorted(embedded.DAEMON_ONLY_VARIABLES - set(cpp))}")


def test_the_rpc_client_gtests_pass_against_a_real_ddod(ddod_binary):
    binary = _tests_binary()
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        pytest.skip(f"{binary} is not built (tools/build.sh builds it with the tests)")
    env = dict(os.environ, DDO_DDOD_BINARY=ddod_binary)
    done = subprocess.run([binary, "--gtest_brief=1"], capture_output=True, text=True,
                          timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "PASSED" in done.stdout, done.stdout[-3000:]
