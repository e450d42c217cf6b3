"""The CUDA driver API's structures that the probes pass through ctypes (cuda.h's layouts)."""

from __future__ import annotations

import ctypes


class AllocProp(ctypes.Structure):
    """CUmemAllocationProp."""
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int),
                ("loc_type", ctypes.c_int), ("loc_id", ctypes.c_int),
                ("win32HandleMetaData", ctypes.c_void_p),
                ("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class IpcHandle(ctypes.Structure):
    """CUipcMemHandle / CUipcEventHandle: 64 bytes, passed by value to the open calls."""
    _fields_ = [("reserved", ctypes.c_char * 64)]


class AccessDesc(ctypes.Structure):
    """CUmemAccessDesc."""
    _fields_ = [("loc_type", ctypes.c_int), ("loc_id", ctypes.c_int), ("flags", ctypes.c_int)]
