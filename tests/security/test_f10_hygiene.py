"""Finding 10: control characters in client names and keys reached ddoctl's output and the log
raw; client_pid was taken as the client said; a `{}` header made a 0-tensor component; a NUL
in a path truncated it; Phase accepted any number; DDO_SMALL_TENSOR_THRESHOLD_KB=1e308 was
accepted.

Now control characters are escaped, the pid comes from the kernel, and each of those inputs is
refused with INVALID_ARGUMENT (or PERMISSION_DENIED for a path from another uid).
"""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import textwrap

import pytest

from attacker_kit import components_pb2, sessions_pb2, write_safetensors
from security_support import (assert_still_serving, parse_result, run_as, start_as,
                              stop_process, wait_for)

ESCAPES = "\x1b[2J\x1b]0;owned\x07\r\n"


def ddoctl_binary() -> str:
    path = os.environ.get("DDO_DDOCTL_BINARY") or os.path.join(
        os.path.dirname(os.path.abspath(os.environ["DDO_DDOD_BINARY"])), "ddoctl")
    if not os.access(path, os.X_OK):
        pytest.skip(f"no ddoctl at {path} (set DDO_DDOCTL_BINARY)")
    return path


def holding_lease(account, socket_path, code):
    """Starts ``code`` as ``account``; it opens what it needs, reports, and waits for stdin."""
    program = textwrap.dedent(code) + "\nimport sys\nsys.stdin.read()\n"
    proc = start_as(account, socket_path, program)
    line = proc.stdout.readline()
    if not line.startswith("RESULT "):
        stop_process(proc)
        return proc, parse_result(line, proc.stderr.read(), proc.returncode)
    return proc, parse_result(line, "", None)


def lease_pids(admin, marker):
    outcome = admin.call("ListSessions", sessions_pb2.ListSessionsRequest(),
                         keep=lambda response: [(lease.client_name, lease.client_pid)
                                                for lease in response.leases])
    assert outcome.ok, outcome
    return [pid for name, pid in outcome["response"] if marker in name]


def test_f10_control_characters_are_escaped_in_ddoctl_and_log(ddod, admin, attacker):
    marker = f"FAKE-{secrets.token_hex(4)}"
    proc, opened = holding_lease(attacker, ddod.socket_path, f"""
        import grpc
        ddo = from_environment()
        try:
            call, lease = ddo.open_lease(client_name="evil" + {ESCAPES!r} + {marker!r})
        except grpc.RpcError as error:  # refusing the name outright is a defence too
            report(lease=error.code().name)
        else:
            mine = own_file("m.safetensors", {{"w": b"12345678"}})
            key = "key" + {ESCAPES!r} + {marker!r}
            report(lease="OK", load=ddo.load(ddo.load_request(lease, key, [mine])))
    """)
    try:
        if opened["lease"] == "OK":
            assert wait_for(lambda: lease_pids(admin, marker), 10), "the lease is not listed"
        else:
            assert opened["lease"] == "INVALID_ARGUMENT", opened
        outputs = {}
        for command in ("sessions", "components"):
            done = subprocess.run([ddoctl_binary(), "--daemon", f"unix:{ddod.socket_path}",
                                   command], capture_output=True, timeout=20)
            outputs[command] = done.stdout + done.stderr
    finally:
        stop_process(proc)
    for command, output in outputs.items():
        if command == "sessions" and opened["lease"] == "OK":
            assert marker.encode() in output, (command, output)
        assert not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", output), (
            f"ddoctl {command} printed raw control characters: {output!r}")
        assert not re.search(rb"(^|\n)" + marker.encode(), output), (
            f"ddoctl {command} printed a line the attacker forged: {output!r}")
    log = ddod.log_bytes()
    assert not re.search(rb"[\x00-\x08\x0b-\x1f\x7f]", log), "the log has raw control characters"
    assert not re.search(rb"(^|\n)" + marker.encode(), log), "the attacker forged a log line"
    assert_still_serving(ddod)


def test_f10_client_pid_comes_from_the_kernel(ddod, admin, attacker):
    marker = f"pid-liar-{secrets.token_hex(4)}"
    proc, opened = holding_lease(attacker, ddod.socket_path, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease(client_name={marker!r}, client_pid=1)
        report(pid=os.getpid())
    """)
    try:
        assert wait_for(lambda: lease_pids(admin, marker), 10)
        pids = lease_pids(admin, marker)
    finally:
        stop_process(proc)
    assert pids == [opened["pid"]], f"ddod believed the client's pid: {pids}, really {opened['pid']}"


def test_f10_empty_header_is_refused(ddod, admin, attacker):
    result = run_as(attacker, ddod.socket_path, """
        ddo = from_environment()
        call, lease = ddo.open_lease()
        empty = write_safetensors(os.path.expanduser("~/empty.safetensors"), {}, header={})
        report(load=ddo.load(ddo.load_request(lease, "empty", [empty])))
    """)
    assert result["load"]["code"] == "INVALID_ARGUMENT", result
    listed = admin.call("ListComponents", components_pb2.ListComponentsRequest(),
                        keep=lambda response: [c.ref.cache_key for c in response.components])
    assert "empty" not in listed["response"], "a 0-tensor component entered the pool"
    assert_still_serving(ddod)


def test_f10_nul_in_a_path_is_refused(ddod, admin, attacker, tmp_path):
    result = run_as(attacker, ddod.socket_path, """
        ddo = from_environment()
        call, lease = ddo.open_lease()
        mine = own_file("m.safetensors", {"w": b"12345678"})
        os.chmod(os.path.expanduser("~"), 0o755)
        os.chmod(mine, 0o644)
        report(load=ddo.load(ddo.load_request(lease, "truncated", [mine + "\\0.ignored"],
                                              by_path=True)))
    """)
    assert result["load"]["code"] in ("INVALID_ARGUMENT", "PERMISSION_DENIED"), result
    # ddod's own uid may pass paths: a NUL must still be refused, not cut the path short.
    os.chmod(tmp_path, 0o700)
    mine = write_safetensors(str(tmp_path / "root.safetensors"), {"w": b"12345678"})
    call, lease = admin.open_lease(client_name="admin")
    try:
        outcome = admin.load(admin.load_request(lease, "truncated-root", [mine + "\0.ignored"],
                                                by_path=True))
    finally:
        call.cancel()
    assert outcome["code"] == "INVALID_ARGUMENT", outcome
    listed = admin.call("ListComponents", components_pb2.ListComponentsRequest(),
                        keep=lambda response: [c.ref.cache_key for c in response.components])
    assert not {"truncated", "truncated-root"} & set(listed["response"]), listed
    assert_still_serving(ddod)


def test_f10_phase_number_is_checked(ddod, attacker):
    result = run_as(attacker, ddod.socket_path, """
        ddo = from_environment()
        call, lease = ddo.open_lease()
        report(phase=ddo.call("Phase", sessions_pb2.PhaseRequest(lease_id=lease, phase=999)))
    """)
    assert result["phase"]["code"] == "INVALID_ARGUMENT", result
    assert_still_serving(ddod)


@pytest.mark.parametrize("value", ["1e308", "inf", "nan", "-1"])
def test_f10_numeric_setting_is_bounded(ddod, attacker, value):
    result = run_as(attacker, ddod.socket_path, f"""
        ddo = from_environment()
        call, lease = ddo.open_lease()
        name = "DDO_SMALL_TENSOR_THRESHOLD_KB"
        weight = "blocks.0.weight"
        path = write_safetensors(os.path.expanduser("~/linear.safetensors"), {{weight: bytes(1024)}},
            header={{weight: {{"dtype": "F32", "shape": [16, 16], "data_offsets": [0, 1024]}}}})
        load = ddo.load(ddo.load_request(lease, "linear", [path]))
        report(
            load=load,
            # A streaming session's settings (Attach) went through their own parser.
            attach=ddo.call("Attach", sessions_pb2.AttachRequest(
                lease_id=lease, cache_key="linear", device_uuid="cpu",
                settings={{name: {value!r}}}, streamable=[weight])),
            override=ddo.call("ResolveSettings", settings_pb2.ResolveSettingsRequest(
                overrides={{name: {value!r}}})),
        )
    """)
    assert result["load"]["code"] == "OK", result
    assert result["attach"]["code"] == "INVALID_ARGUMENT", result
    assert result["override"]["code"] == "INVALID_ARGUMENT", result
    assert_still_serving(ddod)
