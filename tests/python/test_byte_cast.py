"""DDO's fp8 cast kernel (byte_cast.py) off the GPU: every cast the kernel cannot take is
torch's, DDO_CLIENT_CAST_KERNEL=torch keeps torch's without trying, a failure to load the
kernel logs one line and falls back for the process, and the committed PTX is what its source
generates and what ptxas accepts for sm_75 and sm_90 (where /usr/local/cuda/bin/nvcc is). The
kernel itself is tested on the GPU machine: tests/gpu/test_byte_cast_gpu.py."""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

import pytest
import torch

from diffusers_dynamic_offloader import byte_cast
from diffusers_dynamic_offloader.errors import ConfigurationError, DdoError

REPO = Path(__file__).resolve().parents[2]
NVCC = Path("/usr/local/cuda/bin/nvcc")
PTXAS = NVCC.parent / "ptxas"
needs_nvcc = pytest.mark.skipif(not (NVCC.is_file() and PTXAS.is_file()),
                                reason="no CUDA toolkit at /usr/local/cuda")


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    """Each test chooses the caster anew, with DDO_CLIENT_CAST_KERNEL unset."""
    monkeypatch.delenv(byte_cast.MODE_ENV_VAR, raising=False)
    byte_cast.reset()
    yield
    byte_cast.reset()


def _bits(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.view(torch.int32 if tensor.element_size() == 4 else torch.int16)


class FakeExtension:
    """What install() and cast() use of the C++ extension, recorded."""

    def __init__(self):
        self.installed = []
        self.casts = 0

    def byte_cast_install(self, ptx, report):
        self.installed.append((ptx, report))

    def byte_cast(self, tensor, dtype):
        self.casts += 1
        return tensor.to(dtype)


def test_without_cuda_a_cast_is_torchs():
    half = torch.randn(3, 5).half()
    for dtype in (torch.float32, torch.bfloat16):
        assert torch.equal(_bits(byte_cast.cast(half, dtype)), _bits(half.to(dtype)))
    assert not byte_cast.handles(half, torch.float32)  # not on a CUDA device
    integers = torch.arange(256, dtype=torch.uint8)
    assert torch.equal(byte_cast.cast(integers, torch.float32), integers.to(torch.float32))
    assert byte_cast._caster is None, "a cast the kernel cannot take chose no caster"


def test_the_mode_is_auto_or_torch(monkeypatch):
    assert byte_cast.kernel_mode() == "auto"
    monkeypatch.setenv(byte_cast.MODE_ENV_VAR, " Torch ")
    assert byte_cast.kernel_mode() == "torch"
    monkeypatch.setenv(byte_cast.MODE_ENV_VAR, "triton")
    with pytest.raises(ConfigurationError, match="DDO_CLIENT_CAST_KERNEL='triton'"):
        byte_cast.kernel_mode()


def test_the_extension_gets_the_committed_ptx_and_serves_the_casts():
    extension = FakeExtension()
    byte_cast.install(extension)
    ((ptx, report),) = extension.installed
    assert ptx == byte_cast.PTX_PATH.read_text()
    assert ".entry ddo_byte_cast_u16" in ptx and ".entry ddo_byte_cast_u32" in ptx
    assert callable(report)
    assert byte_cast._choose() == extension.byte_cast


def test_torch_mode_installs_nothing_and_casts_with_torch(monkeypatch):
    monkeypatch.setenv(byte_cast.MODE_ENV_VAR, "torch")
    extension = FakeExtension()
    byte_cast.install(extension)
    assert extension.installed == []
    assert byte_cast._choose() is byte_cast._torch_cast


def test_a_missing_ptx_logs_one_line_and_casts_with_torch(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(byte_cast, "PTX_PATH", tmp_path / "missing.ptx")
    extension = FakeExtension()
    with caplog.at_level(logging.WARNING, logger="diffusers_dynamic_offloader"):
        byte_cast.install(extension)
        byte_cast.install(extension)
    assert extension.installed == []
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1, lines
    assert "fp8 cast kernel is off for this process" in lines[0] and "missing.ptx" in lines[0]
    assert "DDO_CLIENT_CAST_KERNEL=torch" in lines[0]
    assert byte_cast._choose() is byte_cast._torch_cast


def test_a_driver_failure_logs_one_line_and_falls_back_for_the_process(monkeypatch, caplog):
    caster = byte_cast._DriverCaster()
    calls = []

    def failing(tensor, dtype):
        calls.append(dtype)
        raise DdoError("cuModuleLoadData(byte_cast) failed: CUDA_ERROR_UNSUPPORTED_PTX_VERSION")

    monkeypatch.setattr(caster, "_launch", failing)
    byte_cast._caster = caster.cast
    half = torch.randn(17).half()  # stands for an fp8 tensor: the launch is what fails
    with caplog.at_level(logging.WARNING, logger="diffusers_dynamic_offloader"):
        assert torch.equal(caster.cast(half, torch.float32), half.to(torch.float32))
        assert byte_cast._caster is byte_cast._torch_cast
        assert torch.equal(caster.cast(half, torch.float32), half.to(torch.float32))
    lines = [record.getMessage() for record in caplog.records]
    assert len(lines) == 1, lines
    assert "CUDA_ERROR_UNSUPPORTED_PTX_VERSION" in lines[0]


def test_the_built_extension_casts_cpu_tensors_with_torch():
    from diffusers_dynamic_offloader import cpp_consumer

    try:
        module = cpp_consumer.find_built()
    except cpp_consumer.CppConsumerUnavailable as error:
        pytest.skip(f"no build of the C++ consumer: {error}")
    half = torch.randn(4, 33).half()
    assert not module.byte_cast_handles(half, torch.float32)
    assert torch.equal(module.byte_cast(half, torch.float32), half.to(torch.float32))
    assert torch.equal(module.byte_cast(half[:, 1:], torch.bfloat16),
                       half[:, 1:].to(torch.bfloat16))


@needs_nvcc
def test_the_committed_ptx_is_what_the_source_generates():
    done = subprocess.run([str(REPO / "tools" / "gen_byte_cast_ptx.sh"), "--check"],
                          capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, NVCC=str(NVCC)))
    assert done.returncode == 0, done.stderr


@needs_nvcc
@pytest.mark.parametrize("gpu", ["sm_75", "sm_90"])
def test_ptxas_accepts_the_committed_ptx(gpu, tmp_path):
    ptx = byte_cast.PTX_PATH.read_text()
    assert ".version 6.3\n" in ptx, "lowered for CUDA 10.0+ drivers (gen_byte_cast_ptx.sh)"
    done = subprocess.run([str(PTXAS), "--gpu-name", gpu, "-o", str(tmp_path / "out.cubin"),
                           str(byte_cast.PTX_PATH)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
