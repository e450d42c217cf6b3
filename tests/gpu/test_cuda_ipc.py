"""GPU only (tests/gpu/run_foundation.sh runs it): device memory exported by another process is
opened through ctypes and viewed as tensors without a copy, bf16 included, and an interprocess
event orders the reads after the exporter's copy."""

import subprocess
import sys

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

EXPORTER = r"""
import ctypes, sys, torch
torch.cuda.init()
cuda = ctypes.CDLL("libcuda.so.1")
data = torch.arange(4096, dtype=torch.float32, device="cuda").to(torch.bfloat16)
pointer = ctypes.c_uint64(data.data_ptr())
handle = (ctypes.c_char * 64)()
assert cuda.cuIpcGetMemHandle(handle, pointer) == 0
# The handle maps the whole cudaMalloc allocation; torch's caching allocator may have put the
# tensor inside it.
base, size = ctypes.c_uint64(), ctypes.c_size_t()
assert cuda.cuMemGetAddressRange_v2(ctypes.byref(base), ctypes.byref(size), pointer) == 0
event = torch.cuda.Event(interprocess=True)
event.record()
sys.stdout.write(bytes(handle).hex() + " " + bytes(event.ipc_handle()).hex() + " "
                 + str(pointer.value - base.value) + "\n")
sys.stdout.flush()
sys.stdin.readline()  # keep the memory alive until the importer is done
"""


def test_open_exported_memory_and_event():
    from diffusers_dynamic_offloader.cuda_ipc import IpcDeviceMemory, tensor_view

    exporter = subprocess.Popen([sys.executable, "-c", EXPORTER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)
    try:
        memory_hex, event_hex, offset = exporter.stdout.readline().split()
        ready = torch.cuda.Event.from_ipc_handle(torch.cuda.current_device(),
                                                 bytes.fromhex(event_hex))
        torch.cuda.current_stream().wait_event(ready)
        with IpcDeviceMemory(bytes.fromhex(memory_hex), torch.cuda.current_device()) as memory:
            view = tensor_view(memory, int(offset), (64, 64), torch.bfloat16)
            expected = torch.arange(4096, dtype=torch.float32, device="cuda").to(torch.bfloat16)
            assert view.dtype == torch.bfloat16 and view.is_cuda
            assert torch.equal(view.reshape(-1), expected)
            tail = tensor_view(memory, int(offset) + 2 * 4000, (96,), torch.bfloat16)
            assert torch.equal(tail, expected[4000:])
    finally:
        exporter.stdin.write("done\n")
        exporter.stdin.flush()
        exporter.wait(30)

