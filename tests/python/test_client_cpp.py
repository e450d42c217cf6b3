"""The C++ client's torch layer against a real ddod, from outside: the gtest binary
ddo_client_tests (streamed outputs bitwise equal to the unstreamed module, errors, ddod's death),
and a C++ runner (client-cpp/examples/transformer_runner) streaming a component while a Python
runner streams the same component, at once, each bitwise equal to its own unstreamed forward.

The binaries sit beside DDO_DDOD_BINARY (tools/build.sh builds them where libtorch is found);
the tests skip, saying so, where they are not built."""

import os
import re
import subprocess

import pytest
import torch
from torch import nn

CACHE_KEY = "cpp-and-python"
DIM, HEADS, BLOCKS, INPUT_DIM = 256, 4, 2, 64


def _binary(name: str) -> str:
    path = os.path.join(os.path.dirname(os.environ.get("DDO_DDOD_BINARY", "build/bin/ddod")), name)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.skip(f"{path} is not built (tools/build.sh builds it where libtorch is found)")
    return path


class Attention(nn.Module):
    """client-cpp/examples/transformer_model.h's AttentionImpl, in Python."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim) for _ in range(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, _ = x.shape

        def split(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, tokens, self.heads, -1).transpose(1, 2)

        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        weights = torch.softmax(q @ k.transpose(-2, -1) * (1.0 / q.shape[-1] ** 0.5), -1)
        return self.o((weights @ v).transpose(1, 2).reshape(batch, tokens, -1))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp_up = nn.Linear(dim, dim * mlp_ratio)
        self.mlp_down = nn.Linear(dim * mlp_ratio, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp_down(nn.functional.gelu(self.mlp_up(self.norm2(x))))


class Transformer(nn.Module):
    """TransformerImpl: the same names, so one component serves both languages."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(INPUT_DIM, DIM)
        self.blocks = nn.ModuleList(Block(DIM, HEADS) for _ in range(BLOCKS))
        self.norm = nn.LayerNorm(DIM)
        self.head = nn.Linear(DIM, INPUT_DIM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x)
        for block in self.blocks:
            h = block(h)
        return self.head(self.norm(h))


def _runner(daemon, *arguments: str) -> subprocess.Popen:
    command = [_binary("transformer_runner"), "--dim", str(DIM), "--heads", str(HEADS),
               "--blocks", str(BLOCKS),
               "--key", CACHE_KEY, "--unit", "linear", "--slots", "2",
               "--setting", "DDO_SMALL_TENSOR_THRESHOLD_KB=0", *arguments]
    env = dict(os.environ, DDO_DAEMON=daemon.address)
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)


def test_the_torch_client_gtests_pass_against_a_real_ddod(ddod_binary):
    binary = _binary("ddo_client_tests")
    done = subprocess.run([binary, "--gtest_brief=1"], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, DDO_DDOD_BINARY=ddod_binary))
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "PASSED" in done.stdout, done.stdout[-3000:]


def test_a_cpp_and_a_python_runner_stream_one_component_at_once(daemon, client):
    # The C++ runner stores the component (its own weights, seed 1) and exits.
    stored = _runner(daemon, "--steps", "1")
    output, _ = stored.communicate(timeout=300)
    assert stored.returncode == 0, output
    assert "uploaded" in output, output

    # Python binds the same component into its copy of the architecture: its reference.
    model = Transformer().eval()
    with client.attach(CACHE_KEY) as attached:
        attached.bind(model)
        reference = {step: _forward(model, step) for step in range(3)}
        settings = {"DDO_SMALL_TENSOR_THRESHOLD_KB": "0", "DDO_STREAM_UNIT": "linear"}
        with client.stream(model, CACHE_KEY, device="cpu", settings=settings) as session:
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
        return model(torch.randn(1, 8, INPUT_DIM, generator=generator))
