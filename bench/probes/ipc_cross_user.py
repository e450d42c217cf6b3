"""Which CUDA sharing mechanisms work between processes of different users?

Run as root on a GPU machine: the parent (root) exports device memory three ways and an
interprocess event; a child running as another user (uid/gid from --uid, default nobody) tries
to open each. Prints one line per mechanism: ok, or the CUDA error. Driver API through ctypes.

    python3 bench/probes/ipc_cross_user.py [--uid 65534]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import subprocess
import sys

from cuda_driver_types import AccessDesc, AllocProp, IpcHandle

CU_EVENT_DISABLE_TIMING = 0x2
CU_EVENT_INTERPROCESS = 0x4
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1
CU_MEM_ALLOCATION_TYPE_PINNED = 0x1
CU_MEM_LOCATION_TYPE_DEVICE = 0x1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1


def driver():
    cu = ctypes.CDLL("libcuda.so.1")
    check(cu, cu.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cu, cu.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    context = ctypes.c_void_p()
    check(cu, cu.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "retain")
    check(cu, cu.cuCtxSetCurrent(context), "setcurrent")
    return cu


def error_name(cu, code):
    name = ctypes.c_char_p()
    cu.cuGetErrorName(code, ctypes.byref(name))
    return name.value.decode() if name.value else str(code)


def check(cu, code, what):
    if code != 0:
        raise RuntimeError(f"{what}: {error_name(cu, code)}")


def parent(uid: int, gid: int) -> None:
    cu = driver()
    size = 2 << 20
    exported = {}
    # 1. Legacy IPC memory handle.
    pointer = ctypes.c_uint64()
    check(cu, cu.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(size)), "cuMemAlloc")
    handle = IpcHandle()
    check(cu, cu.cuIpcGetMemHandle(ctypes.byref(handle), pointer), "cuIpcGetMemHandle")
    exported["legacy_mem"] = bytes(bytearray(handle)).hex()
    # 2. Interprocess event.
    event = ctypes.c_void_p()
    check(cu, cu.cuEventCreate(ctypes.byref(event), CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS),
          "cuEventCreate")
    event_handle = IpcHandle()
    check(cu, cu.cuIpcGetEventHandle(ctypes.byref(event_handle), event), "cuIpcGetEventHandle")
    exported["event"] = bytes(bytearray(event_handle)).hex()
    # Where an interprocess event lives: CUDA keeps its state in a shared-memory file.
    for name in sorted(os.listdir("/dev/shm")):
        info = os.stat(os.path.join("/dev/shm", name))
        print(f"  /dev/shm/{name}: mode {info.st_mode & 0o777:o} uid {info.st_uid}")
    # 3. VMM with a POSIX file descriptor handle.
    prop = AllocProp()
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.loc_type = CU_MEM_LOCATION_TYPE_DEVICE
    prop.loc_id = 0
    granularity = ctypes.c_size_t()
    check(cu, cu.cuMemGetAllocationGranularity(ctypes.byref(granularity), ctypes.byref(prop), 0),
          "granularity")
    vmm_size = max(size, granularity.value)
    generic = ctypes.c_uint64()
    check(cu, cu.cuMemCreate(ctypes.byref(generic), ctypes.c_size_t(vmm_size), ctypes.byref(prop),
                             ctypes.c_ulonglong(0)), "cuMemCreate")
    fd = ctypes.c_int(-1)
    check(cu, cu.cuMemExportToShareableHandle(ctypes.byref(fd), generic,
                                              CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                              ctypes.c_ulonglong(0)), "export")
    os.set_inheritable(fd.value, True)
    exported["vmm_fd"] = fd.value
    exported["vmm_size"] = vmm_size
    child = subprocess.run([sys.executable, __file__, "--child", json.dumps(exported)],
                           user=uid, group=gid, extra_groups=[], pass_fds=[fd.value],
                           capture_output=True, text=True, timeout=120)
    print(child.stdout, end="")
    if child.returncode != 0:
        print(child.stderr[-2000:])


def child(spec: str) -> None:
    exported = json.loads(spec)
    print(f"child uid {os.getuid()} gid {os.getgid()}")
    cu = driver()
    pointer = ctypes.c_uint64()
    handle = IpcHandle.from_buffer_copy(bytes.fromhex(exported["legacy_mem"]))
    code = cu.cuIpcOpenMemHandle_v2(ctypes.byref(pointer), handle,
                                    ctypes.c_uint(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS))
    print(f"legacy IPC memory handle: {'ok' if code == 0 else error_name(cu, code)}")
    event = ctypes.c_void_p()
    event_handle = IpcHandle.from_buffer_copy(bytes.fromhex(exported["event"]))
    code = cu.cuIpcOpenEventHandle(ctypes.byref(event), event_handle)
    print(f"IPC event handle: {'ok' if code == 0 else error_name(cu, code)}")
    generic = ctypes.c_uint64()
    code = cu.cuMemImportFromShareableHandle(ctypes.byref(generic),
                                             ctypes.c_void_p(exported["vmm_fd"]),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
    if code == 0:
        address = ctypes.c_uint64()
        size = ctypes.c_size_t(exported["vmm_size"])
        code = cu.cuMemAddressReserve(ctypes.byref(address), size, ctypes.c_size_t(0),
                                      ctypes.c_uint64(0), ctypes.c_ulonglong(0))
        if code == 0:
            code = cu.cuMemMap(address, size, ctypes.c_size_t(0), generic, ctypes.c_ulonglong(0))
        if code == 0:
            access = AccessDesc(CU_MEM_LOCATION_TYPE_DEVICE, 0, CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            code = cu.cuMemSetAccess(address, size, ctypes.byref(access), ctypes.c_size_t(1))
    print(f"VMM POSIX fd handle: {'ok' if code == 0 else error_name(cu, code)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--uid", type=int, default=65534)
    parser.add_argument("--gid", type=int, default=65534)
    parser.add_argument("--child")
    args = parser.parse_args()
    if args.child:
        child(args.child)
    else:
        print(f"parent uid {os.getuid()}")
        parent(args.uid, args.gid)
        print("same user, for comparison:")
        parent(os.getuid(), os.getgid())
