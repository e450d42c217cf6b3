"""What the CUDA IPC helpers check before touching a GPU (the GPU half is tests/gpu)."""

import pytest

from diffusers_dynamic_offloader.cuda_ipc import IpcDeviceMemory
from diffusers_dynamic_offloader.errors import DdoError


def test_malformed_handle_is_refused_before_any_cuda_call():
    with pytest.raises(DdoError, match="64 bytes, not 5"):
        IpcDeviceMemory(b"short", 0)
