"""Calls whose work in ddod grows with the model are not cut off by the connection's deadline.

Attach may read a component back from its files and fill a slab of resident weights before it
answers; on a loaded 2-core machine a 6 GiB Attach took longer than the 5 s default (CI, stop
44). Here ddod is held still (SIGSTOP) while the call is in flight, for longer than the
connection's deadline: the call must wait for it and succeed."""

import os
import signal
import threading
import time

import torch

import diffusers_dynamic_offloader as ddo
from diffusers_dynamic_offloader import DdoClient
from streaming_support import STREAM_ALL, make_model

CONNECTION_DEADLINE_S = 2.0
HELD_STILL_S = 3.5


def _held_still(daemon, seconds: float) -> threading.Thread:
    """Stops ddod now and lets it go on after ``seconds``, from a thread."""
    os.kill(daemon.proc.pid, signal.SIGSTOP)

    def resume() -> None:
        time.sleep(seconds)
        os.kill(daemon.proc.pid, signal.SIGCONT)

    thread = threading.Thread(target=resume, daemon=True)
    thread.start()
    return thread


def test_a_streaming_attach_outlasts_the_connections_deadline(daemon):
    model = make_model(torch.float32)
    with DdoClient.connect(daemon.address, timeout=CONNECTION_DEADLINE_S) as client:
        client.register_module("deadline/stream", model)
        resumer = _held_still(daemon, HELD_STILL_S)
        started = time.monotonic()
        try:
            with client.stream(model, "deadline/stream", device="cpu", settings=STREAM_ALL):
                waited = time.monotonic() - started
        finally:
            resumer.join()
    assert waited >= HELD_STILL_S - 0.2


def test_a_host_attach_outlasts_the_connections_deadline(daemon):
    with DdoClient.connect(daemon.address, timeout=CONNECTION_DEADLINE_S) as client:
        client.register_module("deadline/host", make_model(torch.float32))
        resumer = _held_still(daemon, HELD_STILL_S)
        try:
            with client.attach("deadline/host") as attached:
                assert attached.tensors
        finally:
            resumer.join()


def test_a_phase_outlasts_the_connections_deadline(daemon):
    with DdoClient.connect(daemon.address, timeout=CONNECTION_DEADLINE_S) as client:
        resumer = _held_still(daemon, HELD_STILL_S)
        try:
            result = ddo.enter_phase("denoise", client=client)
        finally:
            resumer.join()
    assert result["phase"] == "denoise"
