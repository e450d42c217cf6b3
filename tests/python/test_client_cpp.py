"""The C++ client's torch layer against a real ddod, from outside: the gtest binary
ddo_client_tests (streamed outputs bitwise equal to the unstreamed module, errors, ddod's death),
and a C++ runner (client-cpp/examples/transformer_runner) streaming a component while a Python
runner streams the same component, at once, each bitwise equal to its own unstreamed forward.

The binaries sit beside DDO_DDOD_BINARY (tools/build.sh builds them where libtorch is found);
the tests skip, saying so, where they are not built. DDO_TEST_DEVICE picks the device ("cpu"
unless set; the GPU machine runs them on "cuda:0")."""

import copy
import importlib.util
import os
import re
import subprocess

import pytest
import torch
from torch import nn

CACHE_KEY = "cpp-and-python"
DEVICE = os.environ.get("DDO_TEST_DEVICE", "cpu")
DIM, HEADS, BLOCKS, INPUT_DIM = 256, 4, 2, 64


def _binary(name: str) -> str:
    path = os.path.join(os.path.dirname(os.environ.get("DDO_DDOD_BINARY", "build/bin/ddod")), name)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.skip(f"{path} is not built (tools/build.sh builds it where libtorch is found)")
    return path


def _transformer() -> nn.Module:
    """The runner's model in Python (client-cpp/examples/transformer_model.py)."""
    path = os.path.join(os.path.dirname(__file__), "..", "..", "client-cpp", "examples",
                        "transformer_model.py")
    spec = importlib.util.spec_from_file_location("transformer_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.Transformer(DIM, HEADS, BLOCKS, INPUT_DIM)


def _runner(daemon, *arguments: str) -> subprocess.Popen:
    command = [_binary("transformer_runner"), "--dim", str(DIM), "--heads", str(HEADS),
               "--blocks", str(BLOCKS),
               "--key", CACHE_KEY, "--unit", "linear", "--slots", "2", "--device", DEVICE,
               "--setting", "DDO_SMALL_TENSOR_THRESHOLD_KB=0", *arguments]
    env = dict(os.environ, DDO_DAEMON=daemon.address)
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)


def test_the_torch_client_gtests_pass_against_a_real_ddod(ddod_binary):
    binary = _binary("ddo_client_tests")
    done = subprocess.run([binary, "--gtest_brief=1"], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, DDO_DDOD_BINARY=ddod_binary,
                                                DDO_TEST_DEVICE=DEVICE))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "PASSED" in done.stdout, done.stdout[-3000:]


def test_a_cpp_and_a_python_runner_stream_one_component_at_once(daemon, client):
    # The C++ runner stores the component (its own weights, seed 1) and exits.
    stored = _runner(daemon, "--steps", "1")
    output, _ = stored.communicate(timeout=300)
    assert stored.returncode == 0, output
    assert "uploaded" in output, output

    # Python binds the same component into its copy of the architecture: its reference.
    model = _transformer().eval()
    with client.attach(CACHE_KEY) as attached:
        attached.bind(model)
        on_device = copy.deepcopy(model).to(DEVICE)  # all its weights on the device
        reference = {step: _forward(on_device, step) for step in range(3)}
        del on_device
        settings = {"DDO_SMALL_TENSOR_THRESHOLD_KB": "0", "DDO_STREAM_UNIT": "linear"}
        with client.stream(model, CACHE_KEY, device=DEVICE, settings=settings) as session:
            assert _forward(model, 0).equal(reference[0])  # the learning forward
            # The C++ runner streams the same component while this session is open; Python
            # keeps streaming until it is done.
            runner = _runner(daemon, "--steps", "6", "--check")
            forwards = 0
            while runner.poll() is None or forwards < 3:
                step = forwards % 3
                assert _forward(model, step).equal(reference[step]), f"forward {forwards}"
                forwards += 1
            output, _ = runner.communicate(timeout=300)
            assert session.stats()["streamed_uses"] > 0
    assert runner.returncode == 0, output
    assert "warm hit" in output, output  # the component the first runner stored
    assert "6 of 6 outputs bitwise equal" in output, output
    assert re.search(r"units (\d+), ring slots", output).group(1) == str(6 * BLOCKS + 1), output


def _forward(model: nn.Module, step: int) -> torch.Tensor:
    generator = torch.Generator().manual_seed(100 + step)
    with torch.no_grad():
        return model(torch.randn(1, 8, INPUT_DIM, generator=generator).to(DEVICE))
