"""The pool across ddod restarts: adoption after SIGKILL or SIGTERM, corrupted manifests,
truncated segments, and --discard (also implied for embedded daemons)."""

import os
import signal
import subprocess

import grpc
import pytest

from diffusers_dynamic_offloader import DaemonError, DdoClient
from store_support import (
    Child,
    child_env,
    deterministic_state_dict,
    digests,
    manifest_paths,
    pool_files,
    pool_prefix,
    segment_file,
)
from support import process_gone, wait_until

EMBEDDED_UPLOAD_SCRIPT = """
import json, sys, time
from diffusers_dynamic_offloader import DdoClient
from store_support import deterministic_state_dict
client = DdoClient.connect(timeout=10)
client.register_state_dict("embedded", deterministic_state_dict(3))
info = client.component("embedded", with_layout=True).info
print(json.dumps({"segment": info.segments[0].shm_name, "ddod": client.embedded_pid}), flush=True)
time.sleep(600)
"""


def segment_of(client: DdoClient, key: str) -> str:
    info = client.component(key, with_layout=True).info
    assert len(info.segments) == 1
    return info.segments[0].shm_name


def stop(daemon, how: str) -> None:
    if how == "SIGKILL":
        daemon.proc.kill()
        daemon.proc.wait()
    else:
        assert daemon.terminate() == 0, daemon.log()


def not_found(client: DdoClient, key: str) -> bool:
    try:
        client.component(key)
    except DaemonError as error:
        return error.code == grpc.StatusCode.NOT_FOUND
    return False


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_component_survives_a_restart(daemon_factory, short_dir, how):
    socket = os.path.join(short_dir, "r.sock")
    original = deterministic_state_dict(40)
    first = daemon_factory(socket)
    with DdoClient.connect(first.address, timeout=10) as client:
        registered = client.register_state_dict("kept", original, content_hash=True)
        name = segment_of(client, "kept")
    stop(first, how)
    assert os.path.isfile(segment_file(name)), "the segment did not outlive ddod"
    assert manifest_paths(os.environ["DDO_STATE_DIR"])

    second = daemon_factory(socket, "--discard")
    with DdoClient.connect(second.address, timeout=10) as client:
        pool = client.stats().pool
        assert pool.adopted == 1 and pool.components == 1, pool
        again = client.register_state_dict("kept", original, content_hash=True)
        assert again.warm_hit  # no upload
        assert again.component_id == registered.component_id
        assert again.content_hash == registered.content_hash
        assert not any(c.method == "CommitUpload" and c.ok for c in client.stats().rpcs)
        with client.attach("kept") as attached:
            assert digests(attached.tensors) == digests(original)
    # --discard: the adopted segment goes with this ddod.
    assert second.terminate() == 0, second.log()
    assert pool_files(pool_prefix(name)) == []


def corrupt(manifest: str, how: str) -> None:
    with open(manifest, "r+b") as file:
        text = file.read()
        if how == "garbage":
            position = len(text) // 3
            replacement = b"\x00\xffgarbage\"}{]" * 4
        else:
            # Still valid JSON: one digit of a tensor's shape or offset changes.
            position = text.index(b'"shape"')
            position += next(i for i, c in enumerate(text[position:]) if chr(c).isdigit())
            replacement = b"7" if text[position:position + 1] != b"7" else b"3"
        file.seek(position)
        file.write(replacement)


@pytest.mark.parametrize("how", ["garbage", "one digit"])
def test_corrupted_manifest_is_not_trusted(daemon_factory, short_dir, how):
    socket = os.path.join(short_dir, "m.sock")
    first = daemon_factory(socket)
    with DdoClient.connect(first.address, timeout=10) as client:
        client.register_state_dict("victim", deterministic_state_dict(41))
        name = segment_of(client, "victim")
    stop(first, "SIGKILL")
    (manifest,) = manifest_paths(os.environ["DDO_STATE_DIR"])
    corrupt(manifest, how)

    second = daemon_factory(socket)
    with DdoClient.connect(second.address, timeout=10) as client:
        assert not_found(client, "victim")
        assert client.stats().pool.adopted == 0
        assert wait_until(lambda: not os.path.exists(segment_file(name)), 2), (
            "the segment of an untrusted manifest is still in /dev/shm"
        )
        assert "manifest" in second.log()
        # The key can be registered afresh.
        assert not client.register_state_dict("victim", deterministic_state_dict(41)).warm_hit


def test_truncated_segment_is_not_served(daemon_factory, short_dir):
    socket = os.path.join(short_dir, "t.sock")
    first = daemon_factory(socket)
    with DdoClient.connect(first.address, timeout=10) as client:
        client.register_state_dict("cut", deterministic_state_dict(42))
        client.register_state_dict("whole", deterministic_state_dict(43))
        cut = segment_of(client, "cut")
    stop(first, "SIGKILL")
    path = segment_file(cut)
    os.truncate(path, os.stat(path).st_size // 2)

    second = daemon_factory(socket)
    with DdoClient.connect(second.address, timeout=10) as client:
        assert not_found(client, "cut")
        assert client.stats().pool.adopted == 1
        assert client.register_state_dict("whole", deterministic_state_dict(43)).warm_hit
        with client.attach("whole") as attached:
            assert digests(attached.tensors) == digests(deterministic_state_dict(43))
        log = second.log()
        assert "cut" in log or cut.lstrip("/") in log, log


def test_discard_leaves_nothing(daemon_factory, short_dir):
    daemon = daemon_factory(os.path.join(short_dir, "d.sock"), "--discard")
    with DdoClient.connect(daemon.address, timeout=10) as client:
        client.register_state_dict("gone", deterministic_state_dict(44))
        name = segment_of(client, "gone")
    assert os.path.isfile(segment_file(name))
    assert daemon.terminate() == 0, daemon.log()
    assert pool_files(pool_prefix(name)) == []
    assert manifest_paths(os.environ["DDO_STATE_DIR"]) == []


def test_embedded_daemon_leaves_nothing(ddod_binary, monkeypatch):
    monkeypatch.setenv("DDO_DAEMON", "embedded")
    with DdoClient.connect(timeout=10) as client:
        assert client.embedded
        pid = client.embedded_pid
        client.register_state_dict("private", deterministic_state_dict(45))
        name = segment_of(client, "private")
        assert os.path.isfile(segment_file(name))
    assert wait_until(lambda: process_gone(pid), 5)
    assert pool_files(pool_prefix(name)) == []


def test_embedded_daemon_of_a_killed_client_leaves_nothing(ddod_binary):
    child = Child(EMBEDDED_UPLOAD_SCRIPT, child_env("embedded"))
    try:
        report = child.read(timeout=60)
        assert os.path.isfile(segment_file(report["segment"]))
        child.proc.send_signal(signal.SIGKILL)
        child.proc.wait()
    finally:
        child.close()
    assert wait_until(lambda: process_gone(report["ddod"]), 5), "ddod outlived its client"
    assert wait_until(lambda: pool_files(pool_prefix(report["segment"])) == [], 2)


def test_discard_flag_is_documented(ddod_binary):
    usage = subprocess.run([ddod_binary, "--help"], capture_output=True, text=True).stdout
    assert "--discard" in usage
