"""Do CUDA stream memory operations work between processes, and across users? How fast?

Issue 34, item 1 asks for flow control with no CPU in the loop: the runner's stream waits for a
unit with cuStreamWaitValue32 on a word both processes map, written by ddod's copy stream with
cuStreamWriteValue32, and the other way for releases. This probe runs that hand-off between two
processes on one GPU, where the shared word lives in

  - device memory exported with a legacy IPC handle (cuIpcGetMemHandle),
  - device memory of a VMM allocation exported as a POSIX descriptor (cuMemExportToShareableHandle),
  - host shared memory (/dev/shm) that both processes register (cuMemHostRegister, DEVICEMAP),

and, for reference, between two streams of one process. Each case is a ping-pong of --rounds
rounds queued up front on both streams (parent: write ping i, wait pong >= i; child: wait ping
>= i, write pong i), so no CPU takes part once they are queued; the parent times its stream with
events and prints the round trip (two hand-offs). The child runs as the same user, then (as
root) as --uid. A case that does not finish in --timeout seconds is reported as hung, and the
parent releases both streams by writing the words from the CPU.

    python3 bench/probes/stream_memops.py [--rounds 500] [--uid 65534] [--json OUT]

Driver API through ctypes; needs only libcuda.so.1 (no toolkit, no torch).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import subprocess
import sys
import time
from typing import Any, Dict, List, Optional

from cuda_driver_types import AccessDesc, AllocProp, IpcHandle

CU_STREAM_NON_BLOCKING = 0x1
CU_STREAM_WAIT_VALUE_GEQ = 0x0
CU_STREAM_WRITE_VALUE_DEFAULT = 0x0
CU_EVENT_DEFAULT = 0x0
CU_MEMHOSTREGISTER_PORTABLE = 0x1
CU_MEMHOSTREGISTER_DEVICEMAP = 0x2
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 0x1
CU_MEM_ALLOCATION_TYPE_PINNED = 0x1
CU_MEM_LOCATION_TYPE_DEVICE = 0x1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 0x3
CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 0x1
CUDA_ERROR_NOT_READY = 600
# Device attributes that say whether memory operations are there (cuda.h, CUdevice_attribute).
ATTRIBUTES = {"can_use_stream_mem_ops_v1": 92, "can_use_64_bit_stream_mem_ops_v1": 93,
              "can_use_stream_wait_value_nor_v1": 94, "can_flush_remote_writes": 98,
              "can_use_64_bit_stream_mem_ops": 122, "can_use_stream_wait_value_nor": 123}
PING, PONG = 0, 128  # byte offsets of the two words: separate cache lines
REGION = 2 << 20
_KEPT_VIEWS: List[mmap.mmap] = []


class Driver:
    """The few driver calls the probe makes, with their argument types declared."""

    def __init__(self) -> None:
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.check(self.cu.cuInit(0), "cuInit")
        device = ctypes.c_int()
        self.check(self.cu.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
        self.device = device.value
        context = ctypes.c_void_p()
        self.check(self.cu.cuDevicePrimaryCtxRetain(ctypes.byref(context), device), "retain")
        self.check(self.cu.cuCtxSetCurrent(context), "cuCtxSetCurrent")
        self.wait32 = self._function("cuStreamWaitValue32_v2", "cuStreamWaitValue32")
        self.write32 = self._function("cuStreamWriteValue32_v2", "cuStreamWriteValue32")
        for call in (self.wait32, self.write32):
            call.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint]

    def _function(self, *names: str):
        for name in names:
            if hasattr(self.cu, name):
                return getattr(self.cu, name)
        raise RuntimeError(f"libcuda has none of {names}")

    def error_name(self, code: int) -> str:
        name = ctypes.c_char_p()
        self.cu.cuGetErrorName(code, ctypes.byref(name))
        return name.value.decode() if name.value else str(code)

    def check(self, code: int, what: str) -> None:
        if code != 0:
            raise RuntimeError(f"{what}: {self.error_name(code)}")

    def attribute(self, number: int) -> Optional[int]:
        value = ctypes.c_int()
        code = self.cu.cuDeviceGetAttribute(ctypes.byref(value), number, self.device)
        return value.value if code == 0 else None

    def stream(self) -> ctypes.c_void_p:
        stream = ctypes.c_void_p()
        self.check(self.cu.cuStreamCreate(ctypes.byref(stream), CU_STREAM_NON_BLOCKING),
                   "cuStreamCreate")
        return stream

    def event(self) -> ctypes.c_void_p:
        event = ctypes.c_void_p()
        self.check(self.cu.cuEventCreate(ctypes.byref(event), CU_EVENT_DEFAULT), "cuEventCreate")
        return event

    def finished(self, stream: ctypes.c_void_p, timeout: float) -> bool:
        """Polls the stream until it is done (True) or `timeout` seconds passed (False)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.cu.cuStreamQuery(stream)
            if code == 0:
                return True
            if code != CUDA_ERROR_NOT_READY:
                self.check(code, "cuStreamQuery")
            time.sleep(0.001)
        return False

    def set_word(self, address: int, value: int) -> None:
        """Writes a word from the CPU's side, on a stream of its own (never the waiting ones)."""
        stream = self.stream()
        self.check(self.cu.cuMemsetD32Async(ctypes.c_uint64(address), ctypes.c_uint(value),
                                            ctypes.c_size_t(1), stream), "cuMemsetD32Async")
        self.check(self.cu.cuStreamSynchronize(stream), "cuStreamSynchronize")


def queue_rounds(driver: Driver, stream, rounds: int, first: str, ping: int, pong: int) -> None:
    """The parent writes ping i then waits for pong >= i; the child the other way round."""
    for i in range(1, rounds + 1):
        if first == "write":
            driver.check(driver.write32(stream, ping, i, CU_STREAM_WRITE_VALUE_DEFAULT), "write")
            driver.check(driver.wait32(stream, pong, i, CU_STREAM_WAIT_VALUE_GEQ), "wait")
        else:
            driver.check(driver.wait32(stream, ping, i, CU_STREAM_WAIT_VALUE_GEQ), "wait")
            driver.check(driver.write32(stream, pong, i, CU_STREAM_WRITE_VALUE_DEFAULT), "write")


# --- where the words live: each returns (device address of the region, what the child needs) ---

def legacy_ipc_region(driver: Driver):
    pointer = ctypes.c_uint64()
    driver.check(driver.cu.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(REGION)),
                 "cuMemAlloc")
    driver.check(driver.cu.cuMemsetD32_v2(pointer, ctypes.c_uint(0), ctypes.c_size_t(REGION // 4)),
                 "cuMemsetD32")
    handle = IpcHandle()
    driver.check(driver.cu.cuIpcGetMemHandle(ctypes.byref(handle), pointer), "cuIpcGetMemHandle")
    return pointer.value, {"handle": bytes(bytearray(handle)).hex()}, []


def vmm_region(driver: Driver):
    prop = AllocProp()
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
    prop.loc_type = CU_MEM_LOCATION_TYPE_DEVICE
    prop.loc_id = driver.device
    generic = ctypes.c_uint64()
    driver.check(driver.cu.cuMemCreate(ctypes.byref(generic), ctypes.c_size_t(REGION),
                                       ctypes.byref(prop), ctypes.c_ulonglong(0)), "cuMemCreate")
    address = map_vmm(driver, generic)
    driver.check(driver.cu.cuMemsetD32_v2(ctypes.c_uint64(address), ctypes.c_uint(0),
                                          ctypes.c_size_t(REGION // 4)), "cuMemsetD32")
    fd = ctypes.c_int(-1)
    driver.check(driver.cu.cuMemExportToShareableHandle(
        ctypes.byref(fd), generic, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
        ctypes.c_ulonglong(0)), "cuMemExportToShareableHandle")
    os.set_inheritable(fd.value, True)
    return address, {"fd": fd.value}, [fd.value]


def map_vmm(driver: Driver, generic: ctypes.c_uint64) -> int:
    address = ctypes.c_uint64()
    size = ctypes.c_size_t(REGION)
    driver.check(driver.cu.cuMemAddressReserve(ctypes.byref(address), size, ctypes.c_size_t(0),
                                               ctypes.c_uint64(0), ctypes.c_ulonglong(0)),
                 "cuMemAddressReserve")
    driver.check(driver.cu.cuMemMap(address, size, ctypes.c_size_t(0), generic,
                                    ctypes.c_ulonglong(0)), "cuMemMap")
    access = AccessDesc(CU_MEM_LOCATION_TYPE_DEVICE, driver.device,
                        CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    driver.check(driver.cu.cuMemSetAccess(address, size, ctypes.byref(access), ctypes.c_size_t(1)),
                 "cuMemSetAccess")
    return address.value


def host_shm_region(driver: Driver):
    path = f"/dev/shm/ddo-memops-probe-{os.getpid()}"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    os.fchmod(fd, 0o666)  # the child of another user maps it too (a probe, nothing secret)
    os.ftruncate(fd, REGION)
    view = mmap.mmap(fd, REGION)
    os.close(fd)
    address = register_host(driver, view)
    # Kept mapped (and registered) to the end: a later region mapped at the same address would
    # be refused as already registered.
    _KEPT_VIEWS.append(view)
    return address, {"path": path}, [], path


def register_host(driver: Driver, view: mmap.mmap) -> int:
    host = ctypes.addressof(ctypes.c_char.from_buffer(view))
    driver.check(driver.cu.cuMemHostRegister_v2(ctypes.c_void_p(host), ctypes.c_size_t(REGION),
                                                CU_MEMHOSTREGISTER_DEVICEMAP
                                                | CU_MEMHOSTREGISTER_PORTABLE),
                 "cuMemHostRegister")
    device = ctypes.c_uint64()
    driver.check(driver.cu.cuMemHostGetDevicePointer_v2(ctypes.byref(device),
                                                        ctypes.c_void_p(host), 0),
                 "cuMemHostGetDevicePointer")
    return device.value


def child_region(driver: Driver, case: str, spec: Dict[str, Any]):
    """The child's address of the region the parent exported; keeps what must stay alive."""
    if case == "legacy_ipc":
        pointer = ctypes.c_uint64()
        handle = IpcHandle.from_buffer_copy(bytes.fromhex(spec["handle"]))
        flags = ctypes.c_uint(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        driver.check(driver.cu.cuIpcOpenMemHandle_v2(ctypes.byref(pointer), handle, flags),
                     "cuIpcOpenMemHandle")
        return pointer.value, None
    if case == "vmm_fd":
        generic = ctypes.c_uint64()
        driver.check(driver.cu.cuMemImportFromShareableHandle(
            ctypes.byref(generic), ctypes.c_void_p(spec["fd"]),
            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR), "cuMemImportFromShareableHandle")
        return map_vmm(driver, generic), None
    fd = os.open(spec["path"], os.O_RDWR)
    view = mmap.mmap(fd, REGION)
    os.close(fd)
    return register_host(driver, view), view


# --- the two sides ---

def child_main(case: str, spec_text: str, rounds: int, timeout: float) -> int:
    """Queues the child's rounds, says "ready" on stdout, then waits for its stream."""
    result: Dict[str, Any] = {"uid": os.getuid()}
    try:
        driver = Driver()
        address, keep = child_region(driver, case, json.loads(spec_text))
        stream = driver.stream()
        queue_rounds(driver, stream, rounds, "wait", address + PING, address + PONG)
    except RuntimeError as error:
        print(json.dumps(dict(result, error=str(error))), flush=True)
        return 1
    print("ready", flush=True)
    result["finished"] = driver.finished(stream, timeout)
    print(json.dumps(result), flush=True)
    del keep
    return 0


def run_case(driver: Driver, case: str, rounds: int, timeout: float,
             uid: Optional[int]) -> Dict[str, Any]:
    made = {"legacy_ipc": legacy_ipc_region, "vmm_fd": vmm_region,
            "host_shm": host_shm_region}[case](driver)
    address, spec, pass_fds = made[0], made[1], made[2]
    cleanup = made[3] if len(made) > 3 else None
    as_user = {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}
    child = subprocess.Popen(
        [sys.executable, __file__, "--child", case, json.dumps(spec), "--rounds", str(rounds),
         "--timeout", str(timeout)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, pass_fds=pass_fds, **as_user)
    try:
        line = child.stdout.readline().strip()
        if line != "ready":
            child.wait(timeout=30)
            detail = line or child.stderr.read()[-800:]
            return {"case": case, "child_uid": uid, "error": f"child: {detail}"}
        return dict(time_rounds(driver, address, rounds, timeout, child), case=case,
                    child_uid=uid if uid is not None else os.getuid())
    finally:
        if child.poll() is None:
            try:
                child.wait(timeout=timeout + 10)
            except subprocess.TimeoutExpired:
                child.kill()
        if cleanup is not None:
            os.unlink(cleanup)


def time_rounds(driver: Driver, address: int, rounds: int, timeout: float,
                child: Optional[subprocess.Popen]) -> Dict[str, Any]:
    stream, start, end = driver.stream(), driver.event(), driver.event()
    driver.check(driver.cu.cuEventRecord(start, stream), "cuEventRecord")
    queue_rounds(driver, stream, rounds, "write", address + PING, address + PONG)
    driver.check(driver.cu.cuEventRecord(end, stream), "cuEventRecord")
    if not driver.finished(stream, timeout):
        # Release both sides: every wait is for a value <= rounds.
        driver.set_word(address + PONG, rounds)
        driver.set_word(address + PING, rounds)
        return {"hung": True, "rounds": rounds}
    elapsed = ctypes.c_float()
    driver.check(driver.cu.cuEventElapsedTime(ctypes.byref(elapsed), start, end),
                 "cuEventElapsedTime")
    result: Dict[str, Any] = {"rounds": rounds, "round_trip_us": elapsed.value * 1000 / rounds}
    if child is not None:
        line = child.stdout.readline().strip()
        result["child"] = json.loads(line) if line.startswith("{") else line
    return result


def same_process(driver: Driver, rounds: int, timeout: float) -> Dict[str, Any]:
    """Two streams of one context: the floor the other cases are read against."""
    address = legacy_ipc_region(driver)[0]
    other = driver.stream()
    queue_rounds(driver, other, rounds, "wait", address + PING, address + PONG)
    return dict(time_rounds(driver, address, rounds, timeout, None), case="same_process")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--uid", type=int, default=65534, help="the other user (as root)")
    parser.add_argument("--timeout", type=float, default=20.0)
    parser.add_argument("--json", default="", help="also write the results here")
    parser.add_argument("--child", nargs=2, metavar=("CASE", "SPEC"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child_main(args.child[0], args.child[1], args.rounds, args.timeout)

    driver = Driver()
    version = ctypes.c_int()
    driver.cu.cuDriverGetVersion(ctypes.byref(version))
    results: List[Dict[str, Any]] = [{"driver_version": version.value, "attributes": {
        name: driver.attribute(number) for name, number in ATTRIBUTES.items()}}]
    print(json.dumps(results[0]))
    users: List[Optional[int]] = [None] + ([args.uid] if os.getuid() == 0 else [])
    try:
        results.append(same_process(driver, args.rounds, args.timeout))
        print(json.dumps(results[-1]), flush=True)
    except RuntimeError as error:
        results.append({"case": "same_process", "error": str(error)})
        print(json.dumps(results[-1]), flush=True)
    for case in ("legacy_ipc", "vmm_fd", "host_shm"):
        for uid in users:
            try:
                results.append(run_case(driver, case, args.rounds, args.timeout, uid))
            except RuntimeError as error:
                results.append({"case": case, "child_uid": uid, "error": str(error)})
            print(json.dumps(results[-1]), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(results, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
