"""Device memory and events that ddod exports, opened in this process without a compiled
extension.

Memory comes as a legacy CUDA IPC handle (64 bytes): ``cuIpcOpenMemHandle_v2`` from libcuda,
called through ctypes, maps it; :func:`tensor_view` wraps the mapping as a torch tensor without a
copy (``__cuda_array_interface__``; bfloat16 and float8 travel as same-sized integers and are
viewed back). Events come as CUDA IPC event handles, which torch opens itself
(``torch.cuda.Event.from_ipc_handle``).

The mapping stays valid until :meth:`IpcDeviceMemory.close`; tensors made from it must not be
used after that.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from typing import Optional, Sequence

import torch

from ._closeable import Closeable
from .errors import DdoError

IPC_HANDLE_BYTES = 64
_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1

# dtypes __cuda_array_interface__ cannot name, carried as an integer type of the same size.
_CARRIER = {torch.bfloat16: torch.int16}
for _name in ("float8_e4m3fn", "float8_e5m2"):
    if hasattr(torch, _name):
        _CARRIER[getattr(torch, _name)] = torch.uint8

_TYPESTR = {
    torch.float64: "<f8", torch.float32: "<f4", torch.float16: "<f2",
    torch.int64: "<i8", torch.int32: "<i4", torch.int16: "<i2", torch.int8: "|i1",
    torch.uint8: "|u1", torch.bool: "|b1",
}

_libcuda: Optional[ctypes.CDLL] = None


def _driver() -> ctypes.CDLL:
    """libcuda, loaded once; DdoError when this machine has no CUDA driver."""
    global _libcuda
    if _libcuda is None:
        name = ctypes.util.find_library("cuda") or "libcuda.so.1"
        try:
            _libcuda = ctypes.CDLL(name)
        except OSError as error:
            raise DdoError(f"cannot load the CUDA driver ({name}): {error}") from error
    return _libcuda


def _check(result: int, what: str) -> None:
    if result != 0:
        name = ctypes.c_char_p()
        _driver().cuGetErrorName(result, ctypes.byref(name))
        label = name.value.decode() if name.value else f"CUresult {result}"
        raise DdoError(f"{what} failed: {label}")


class _IpcMemHandle(ctypes.Structure):
    """CUipcMemHandle: 64 opaque bytes, passed by value."""

    _fields_ = [("reserved", ctypes.c_char * IPC_HANDLE_BYTES)]


class IpcDeviceMemory(Closeable):
    """Device memory another process exported, mapped into this one."""

    def __init__(self, handle: bytes, device: int) -> None:
        if len(handle) != IPC_HANDLE_BYTES:
            raise DdoError(
                f"a CUDA IPC memory handle has {IPC_HANDLE_BYTES} bytes, not {len(handle)}")
        self.device = device
        # The driver call uses the current context: make torch's primary context current (an
        # allocation creates it; torch.cuda.init() alone may not).
        torch.cuda.set_device(device)
        torch.zeros(1, device=f"cuda:{device}")
        # CUipcMemHandle is a 64-byte struct passed by value: a ctypes array would be passed
        # as a pointer (the driver then reads garbage: CUDA_ERROR_INVALID_VALUE).
        raw = _IpcMemHandle.from_buffer_copy(handle)
        pointer = ctypes.c_uint64()
        open_handle = getattr(_driver(), "cuIpcOpenMemHandle_v2", None) or _driver().cuIpcOpenMemHandle
        open_handle.argtypes = [ctypes.POINTER(ctypes.c_uint64), _IpcMemHandle, ctypes.c_uint]
        _check(open_handle(ctypes.byref(pointer), raw, _CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
               "cuIpcOpenMemHandle")
        self.pointer: int = pointer.value

    def close(self) -> None:
        if self.pointer:
            torch.cuda.set_device(self.device)
            _check(_driver().cuIpcCloseMemHandle(ctypes.c_uint64(self.pointer)),
                   "cuIpcCloseMemHandle")
            self.pointer = 0


class _CudaArray:
    """The minimal object torch.as_tensor accepts through __cuda_array_interface__."""

    def __init__(self, pointer: int, shape: Sequence[int], typestr: str) -> None:
        self.__cuda_array_interface__ = {
            "data": (pointer, False),
            "shape": tuple(shape),
            "typestr": typestr,
            "version": 2,
        }


def tensor_view(memory: IpcDeviceMemory, offset: int, shape: Sequence[int],
                dtype: torch.dtype) -> torch.Tensor:
    """A tensor over ``memory`` at byte ``offset``, without copying."""
    carrier = _CARRIER.get(dtype, dtype)
    if carrier not in _TYPESTR:
        raise DdoError(f"cannot view device memory as {dtype}")
    array = _CudaArray(memory.pointer + offset, shape, _TYPESTR[carrier])
    tensor = torch.as_tensor(array, device=f"cuda:{memory.device}")
    return tensor.view(dtype) if carrier is not dtype else tensor
