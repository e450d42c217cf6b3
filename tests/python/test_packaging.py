"""The client as a user installs it: `pip install ./client-python` into a fresh target (no
index, no build isolation: Debian's pip and setuptools), then imported from there alone, with
its metadata naming what the public API needs (issue 16, item 1)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_pip_installs_the_client_with_its_dependencies_declared(tmp_path):
    pip = subprocess.run([sys.executable, "-m", "pip", "--version"], capture_output=True)
    assert pip.returncode == 0, "no pip for this python: tools/install-deps.sh installs python3-pip"
    source = tmp_path / "client-python"  # a copy: pip builds in the source tree
    shutil.copytree(REPO / "client-python", source,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    target = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps",
         "--no-index", "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    package = target / "diffusers_dynamic_offloader"
    assert (package / "py.typed").is_file()
    assert (package / "_proto" / "ddo_pb2_grpc.py").is_file(), "the protocol stubs are missing"
    assert (package / "kernels" / "byte_cast.ptx").is_file(), "the fp8 cast kernel is missing"
    (metadata,) = target.glob("diffusers_dynamic_offloader-*.dist-info/METADATA")
    text = metadata.read_text()
    for requirement in ("Requires-Dist: grpcio", "Requires-Dist: protobuf", "Requires-Dist: torch",
                        "Requires-Dist: xxhash", "Requires-Dist: tqdm",
                        "Provides-Extra: diffusers", "License: Apache-2.0"):
        assert requirement in text, f"{requirement!r} missing from METADATA"
    # Imported from the target alone (not the checkout), the public API is there.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    check = subprocess.run(
        [sys.executable, "-c", "import diffusers_dynamic_offloader as d; "
         "print(d.__file__); d.enable_offload; d.DdoClient; d.GraphCaptureError"],
        capture_output=True, text=True, env=env, timeout=120)
    assert check.returncode == 0, check.stderr[-3000:]
    assert check.stdout.startswith(str(target)), check.stdout
