"""Probe (device machine): does waiting on or recording a CUDA interprocess event block the
host? Process A records an IPC event after a ~50 ms GPU sleep; process B times
stream.wait_event(event), event.query() and recording its own IPC event.

    python3 bench/probes/ipc_event_timing.py
"""
import subprocess
import sys
import time

import torch

EXPORTER = r"""
import sys, time, torch
torch.cuda.init()
event = torch.cuda.Event(interprocess=True)
cycles = int(sys.argv[1])
sys.stdout.write(bytes(event.ipc_handle()).hex() + "\n"); sys.stdout.flush()
for line in sys.stdin:
    torch.cuda._sleep(cycles)
    event.record()
    sys.stdout.write("recorded\n"); sys.stdout.flush()
"""


def main() -> None:
    torch.cuda.init()
    clock_hz = torch.cuda.get_device_properties(0).clock_rate * 1000 if hasattr(
        torch.cuda.get_device_properties(0), "clock_rate") else 1.98e9
    cycles = int(0.05 * clock_hz)
    exporter = subprocess.Popen([sys.executable, "-c", EXPORTER, str(cycles)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    handle = bytes.fromhex(exporter.stdout.readline().strip())
    remote = torch.cuda.Event.from_ipc_handle(0, handle)
    own = torch.cuda.Event(interprocess=True)
    local = torch.cuda.Event()
    stream = torch.cuda.current_stream()
    for trial in range(3):
        exporter.stdin.write("go\n"); exporter.stdin.flush()
        exporter.stdout.readline()
        t0 = time.perf_counter(); done = remote.query(); t1 = time.perf_counter()
        stream.wait_event(remote); t2 = time.perf_counter()
        own.record(stream); t3 = time.perf_counter()
        local.record(stream); t4 = time.perf_counter()
        torch.cuda.synchronize(); t5 = time.perf_counter()
        print(f"trial {trial}: query {1e6*(t1-t0):.1f} us (done={done}), wait_event on a pending "
              f"remote event {1e6*(t2-t1):.1f} us, record IPC event {1e6*(t3-t2):.1f} us, "
              f"record local event {1e6*(t4-t3):.1f} us, then synchronize {1e3*(t5-t4):.1f} ms")
    # Steady-state cost of record + wait on IPC events with nothing pending.
    n = 2000
    t0 = time.perf_counter()
    for _ in range(n):
        own.record(stream)
    t1 = time.perf_counter()
    for _ in range(n):
        stream.wait_event(remote)
    t2 = time.perf_counter()
    for _ in range(n):
        torch.cuda.current_stream()
    t3 = time.perf_counter()
    print(f"idle: IPC record {1e6*(t1-t0)/n:.1f} us, IPC wait {1e6*(t2-t1)/n:.1f} us, "
          f"current_stream() {1e6*(t3-t2)/n:.1f} us")
    exporter.stdin.close(); exporter.wait()


if __name__ == "__main__":
    main()
