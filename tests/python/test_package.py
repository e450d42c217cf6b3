"""The package imports cleanly: generated stubs load, and the import stays light."""

import os
import subprocess
import sys

import diffusers_dynamic_offloader
from support import python_env

PROTO_DIR = os.path.join(os.path.dirname(diffusers_dynamic_offloader.__file__), "_proto")


def run_python(code: str) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter that imports the package under test."""
    return subprocess.run(
        [sys.executable, "-c", code], env=python_env(), capture_output=True, text=True, timeout=60
    )


def test_every_generated_stub_module_imports():
    modules = sorted(name[:-3] for name in os.listdir(PROTO_DIR) if name.endswith("_pb2.py"))
    modules += [f"{name}_grpc" for name in modules]
    assert "ddo_pb2_grpc" in modules and "health_pb2" in modules
    # A fresh interpreter: this one may hold grpc_health's copy of the health stubs.
    result = run_python(
        "import importlib\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module('diffusers_dynamic_offloader._proto.' + name)\n"
        "from diffusers_dynamic_offloader._proto import ddo_pb2\n"
        "print(sorted(ddo_pb2.DESCRIPTOR.services_by_name['Ddo'].methods_by_name)[:3])\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['AbortUpload', 'Attach', 'CommitUpload']"


def test_import_does_not_load_torch():
    result = run_python(
        "import sys, diffusers_dynamic_offloader as d\n"
        "print(d.__version__, 'torch' in sys.modules)"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["0.1.0", "False"]


def test_public_names():
    from diffusers_dynamic_offloader import (
        ConfigurationError,
        DaemonError,
        DaemonUnavailableError,
        DdoError,
        EmbeddedDaemonError,
    )

    for error in (ConfigurationError, DaemonError, DaemonUnavailableError, EmbeddedDaemonError):
        assert issubclass(error, DdoError)
    assert issubclass(ConfigurationError, ValueError)
    assert diffusers_dynamic_offloader.__version__ == "0.1.0"
