"""Issue 31, the lower items: what a client sends before it checked the socket, the consumer
extension's directory, and descriptors FILE takes.

- ``ddoctl`` (and both clients over TCP) sent a token-less health check to a socket before
  checking who could have put it there or who holds the port. Now every check comes before
  the first byte: a listener of the attacker's records that nothing reached it.
- The Python client's C++ consumer extension is loaded only from a directory that belongs to
  root or the user and that no one else can write (nor any directory above it); torch's shared
  ``TORCH_EXTENSIONS_DIR`` is never used.
- ``FILE`` on the identity socket took an ``O_PATH`` or write-only descriptor: one that needs
  no read permission on the file, yet carries its identity (device, inode, times). Now ddod
  takes only descriptors open for reading.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import sysconfig

import pytest

from security_support import (BOTH_DAEMONS, CLIENT_SOURCE, REPO_ROOT, SUITE_DIR,
                              parse_result, random_suffix, run_as, start_as, stop_process)


def ddoctl_binary() -> str:
    path = os.environ.get("DDO_DDOCTL_BINARY") or os.path.join(
        os.path.dirname(os.path.abspath(os.environ["DDO_DDOD_BINARY"])), "ddoctl")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no ddoctl at {path} (set DDO_DDOCTL_BINARY)")
    return os.path.abspath(path)


# What the attacker runs: a listener that counts what reaches it until the test asks (a line
# on stdin), then reports.
RECORDER = """
    import select, socket, sys
    kind, where = sys.argv[1], sys.argv[2]
    if kind == "unix":
        os.makedirs(os.path.dirname(where), exist_ok=True)
        os.chmod(os.path.dirname(where), 0o755)
        listener = socket.socket(socket.AF_UNIX)
        listener.bind(where)
        os.chmod(where, 0o777)
    else:
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1] if kind == "tcp" else 0
    sys.stdout.write(f"LISTENING {port}\\n")
    sys.stdout.flush()
    received, connections, peers = b"", 0, []
    while True:
        ready, _, _ = select.select([listener, sys.stdin] + peers, [], [], 30)
        if not ready or sys.stdin in ready:
            break
        for one in ready:
            if one is listener:
                peer, _ = listener.accept()
                connections += 1
                peers.append(peer)
            else:
                data = one.recv(65536)
                received += data
                if not data:
                    peers.remove(one)
    report(connections=connections, received=received.hex())
"""


class Recorder:
    """The attacker's listener (``kind`` unix or tcp) and what reached it."""

    def __init__(self, attacker, kind: str, where: str = "") -> None:
        self.proc = start_as(attacker, "", "", args=[
            sys.executable, "-c", "from attacker_kit import *\n" + _dedent(RECORDER), kind,
            where])
        line = self.proc.stdout.readline()
        if not line.startswith("LISTENING "):
            stop_process(self.proc)
            raise AssertionError(f"the attacker's listener did not start: {line!r} "
                                 f"{self.proc.stderr.read()}")
        self.port = int(line.split()[1])

    def finish(self) -> dict:
        try:
            out, err = self.proc.communicate("done\n", timeout=15)
        finally:
            stop_process(self.proc)
        return parse_result(out, err, self.proc.returncode)


def _dedent(code: str) -> str:
    import textwrap

    return textwrap.dedent(code)


@pytest.fixture
def attacker_dir():
    path = f"/tmp/ddo-sec-fake-{random_suffix()}"
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_t3_lower_ddoctl_sends_nothing_to_a_socket_another_user_could_have_put_there(
        attacker, victim, attacker_dir):
    ddoctl = ddoctl_binary()
    socket_path = os.path.join(attacker_dir, "ddod.sock")
    recorder = Recorder(attacker, "unix", socket_path)
    try:
        result = run_as(victim, "", f"""
            import subprocess
            done = subprocess.run([{ddoctl!r}, "--daemon", "unix:" + {socket_path!r}, "status"],
                                  capture_output=True, text=True, timeout=20)
            report(code=done.returncode, output=done.stdout + done.stderr)
        """)
    finally:
        seen = recorder.finish()
    assert seen["connections"] == 0 and seen["received"] == "", (
        f"ddoctl sent {len(seen['received']) // 2} byte(s) over {seen['connections']} "
        f"connection(s) to a socket of the attacker's before checking it: {result}")
    assert result["code"] != 0, result
    assert attacker_dir in result["output"], result


@pytest.mark.parametrize("client", ["ddoctl", "python"])
def test_t3_lower_clients_send_nothing_to_a_tcp_port_another_user_holds(attacker, victim,
                                                                        client):
    recorder = Recorder(attacker, "tcp")
    target = f"127.0.0.1:{recorder.port}"
    try:
        if client == "ddoctl":
            result = run_as(victim, "", f"""
                import subprocess
                done = subprocess.run([{ddoctl_binary()!r}, "--daemon", {target!r}, "status"],
                                      capture_output=True, text=True, timeout=20)
                report(code=done.returncode, output=done.stdout + done.stderr)
            """)
            refused, said = result["code"] != 0, result["output"]
        else:
            result = run_as(victim, "", f"""
                from diffusers_dynamic_offloader import DdoClient
                from diffusers_dynamic_offloader.errors import DdoError
                try:
                    DdoClient.connect({target!r}, allow_embedded=False, timeout=3)
                except DdoError as error:
                    report(refused=True, output=type(error).__name__ + ": " + str(error))
                else:
                    report(refused=False, output="")
            """)
            refused, said = result["refused"], result["output"]
    finally:
        seen = recorder.finish()
    assert seen["connections"] == 0 and seen["received"] == "", (
        f"{client} sent {len(seen['received']) // 2} byte(s) over {seen['connections']} "
        f"connection(s) to the attacker's port before checking its owner: {result}")
    assert refused, result
    assert f"held by uid {attacker.uid}" in said, result


@BOTH_DAEMONS  # the other tests here attack a client, with no ddod
def test_t3_lower_file_refuses_descriptors_not_open_for_reading(ddod, attacker, victim):
    # The victim's model: 0600 in a directory others may cross but not list (0711).
    shared = f"/tmp/ddo-sec-files-{random_suffix()}"
    os.mkdir(shared)
    os.chown(shared, victim.uid, victim.gid)
    os.chmod(shared, 0o711)
    key = f"victim-model-{secrets.token_hex(4)}"
    secret = b"the victim's weights, unreadable"
    try:
        loaded = run_as(victim, ddod, f"""
            ddo = from_environment()
            call, lease = ddo.open_lease(client_name="victim")
            path = write_safetensors(os.path.join({shared!r}, "model.safetensors"),
                                     {{"weight": {secret!r}}})
            report(load=ddo.load(ddo.load_request(lease, {key!r}, [path])))
        """)
        assert loaded["load"]["code"] == "OK", loaded
        result = run_as(attacker, ddod, f"""
            ddo = from_environment()
            path = os.path.join({shared!r}, "model.safetensors")
            try:
                open(path, "rb")
                readable = True
            except PermissionError:
                readable = False
            answers = {{}}
            # O_PATH needs only the right to cross the directory.
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            answers["o_path"], _ = ddo.identity.ask("FILE model.safetensors", [fd])
            own = write_safetensors(os.path.expanduser("~/mine.safetensors"), {{"weight": b"x"}})
            for name, flags in (("o_wronly", os.O_WRONLY), ("o_rdonly", os.O_RDONLY),
                                ("o_rdwr", os.O_RDWR)):
                mine = os.open(own, flags | os.O_CLOEXEC)
                answers[name], _ = ddo.identity.ask("FILE mine.safetensors", [mine])
            # What the O_PATH handle would have been good for: the victim's key, warm.
            leaked = ""
            if answers["o_path"].startswith("OK "):
                call, lease = ddo.open_lease()
                request = components_pb2.LoadSafetensorsRequest(lease_id=lease, cache_key={key!r})
                request.file_handles.append(int(answers["o_path"].split()[1]))
                outcome = ddo.load(request)
                if outcome.ok:
                    try:
                        leaked = read_component(ddo, lease, {key!r}).get("weight", b"").hex()
                    except Exception as error:
                        leaked = f"unreadable: {{error}}"
            report(readable=readable, answers=answers, leaked=leaked)
        """)
    finally:
        shutil.rmtree(shared, ignore_errors=True)
    assert not result["readable"], "the test's premise: the attacker cannot read the file"
    assert result["leaked"] != secret.hex(), (
        f"an O_PATH descriptor of a file it cannot read served the attacker the victim's "
        f"bytes: {result}")
    answers = result["answers"]
    assert answers["o_path"].startswith("ERR "), answers
    assert answers["o_wronly"].startswith("ERR "), answers
    assert answers["o_rdonly"].startswith("OK "), answers
    assert answers["o_rdwr"].startswith("OK "), answers


# The consumer extension.

MARKER_EXTENSION = r"""
#include <Python.h>
#include <stdio.h>
#include <stdlib.h>
static struct PyModuleDef definition = {PyModuleDef_HEAD_INIT, "%(module)s", NULL, -1, NULL};
PyMODINIT_FUNC PyInit_%(module)s(void) {
  const char* marker = getenv("DDO_SEC_MARKER");
  if (marker != NULL) {
    FILE* out = fopen(marker, "w");
    if (out != NULL) { fputs("the planted extension ran\n", out); fclose(out); }
  }
  return PyModule_Create(&definition);
}
"""


def _expected_metadata(sources: str) -> dict:
    """What the client expects of a build for the sources in ``sources``, computed as a
    victim's client would (any user can)."""
    code = ("import json, pathlib\n"
            "from diffusers_dynamic_offloader import consumer_build as b\n"
            f"print(json.dumps(b.expected_metadata(b.source_hash(pathlib.Path({sources!r})))))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=CLIENT_SOURCE), check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _plant_build(directory: str, metadata: dict, owner_uid: int, owner_gid: int) -> None:
    """A build that passes every check of its metadata, whose init writes $DDO_SEC_MARKER."""
    os.makedirs(directory, exist_ok=True)
    source = os.path.join(directory, "marker.c")
    with open(source, "w") as out:
        out.write(MARKER_EXTENSION % {"module": metadata["module"]})
    library = os.path.join(directory, metadata["module"] + ".so")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", library, source,
                    f"-I{sysconfig.get_paths()['include']}"], check=True, capture_output=True)
    os.unlink(source)
    with open(os.path.join(directory, "ddo_consumer.json"), "w") as out:
        json.dump(metadata, out)
    for path in (library, os.path.join(directory, "ddo_consumer.json")):
        os.chown(path, owner_uid, owner_gid)
        os.chmod(path, 0o644)


VICTIM_STREAMS = """
    from diffusers_dynamic_offloader import cpp_consumer
    from diffusers_dynamic_offloader.runner_log import logger
    import logging
    lines = []
    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())
    logger.addHandler(Keep())
    logger.setLevel(logging.INFO)
    try:
        module = cpp_consumer.extension()
        loaded = None if module is None else module.__file__
    except Exception as error:  # the stand-in is no consumer: it fails once imported
        loaded = f"{type(error).__name__}: {error}"
    report(loaded=loaded, ran=os.path.exists(os.environ["DDO_SEC_MARKER"]), lines=lines)
"""


@pytest.fixture
def no_gcc_skip():
    if shutil.which("gcc") is None or not os.path.exists(
            os.path.join(sysconfig.get_paths()["include"], "Python.h")):
        pytest.skip("needs gcc and Python's headers to build a stand-in extension")


def test_t3_lower_a_planted_torch_extensions_dir_is_never_loaded(no_gcc_skip, attacker,
                                                                 victim):
    shared = f"/tmp/ddo-sec-torch-ext-{random_suffix()}"
    os.mkdir(shared)
    os.chmod(shared, 0o1777)  # a TORCH_EXTENSIONS_DIR several users share
    marker = os.path.join(victim.home, "planted-ran")
    try:
        metadata = _expected_metadata(REPO_ROOT)
        # Where torch would build and load it: $TORCH_EXTENSIONS_DIR/<name>.
        _plant_build(os.path.join(shared, metadata["module"]), metadata, attacker.uid,
                     attacker.gid)
        result = run_as(victim, "", VICTIM_STREAMS, TORCH_EXTENSIONS_DIR=shared,
                        DDO_CLIENT_CONSUMER="auto", DDO_SEC_MARKER=marker,
                        XDG_CACHE_HOME=os.path.join(victim.home, ".cache"))
    finally:
        shutil.rmtree(shared, ignore_errors=True)
        shutil.rmtree(os.path.join(victim.home, ".cache"), ignore_errors=True)
    assert not result["ran"] and result["loaded"] is None, result
    assert len([line for line in result["lines"] if "Python consumer" in line]) == 1, result


def test_t3_lower_an_extension_in_a_directory_others_can_write_is_not_loaded(
        no_gcc_skip, attacker, victim):
    # The client installed in a directory the attacker's group may write (a shared venv):
    # whatever build lies there now, the attacker can swap it at any moment.
    site = f"/tmp/ddo-sec-site-{random_suffix()}"
    package = os.path.join(site, "diffusers_dynamic_offloader")
    shutil.copytree(os.path.join(CLIENT_SOURCE, "diffusers_dynamic_offloader"), package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    marker = os.path.join(victim.home, "shared-ran")
    try:
        metadata = _expected_metadata(REPO_ROOT)
        _plant_build(package, metadata, 0, 0)  # root's files: only the directory is open
        for path in (site, package):
            os.chown(path, 0, attacker.gid)
            os.chmod(path, 0o775)
        result = run_as(victim, "", VICTIM_STREAMS, PYTHONPATH=f"{site}:{SUITE_DIR}",
                        DDO_CLIENT_CPP_SOURCES=REPO_ROOT, DDO_CLIENT_CONSUMER="auto",
                        DDO_SEC_MARKER=marker,
                        XDG_CACHE_HOME=os.path.join(victim.home, ".cache-empty"))
    finally:
        shutil.rmtree(site, ignore_errors=True)
        shutil.rmtree(os.path.join(victim.home, ".cache-empty"), ignore_errors=True)
    assert not result["ran"] and result["loaded"] is None, (
        f"the victim loaded an extension from {package}, which the attacker may write: {result}")
    [line] = [line for line in result["lines"] if "Python consumer" in line]
    assert package in line and "not trusted" in line, line
