"""ddoctl's command line against a real ddod: `--json presets NAME` answers that one preset,
a usage error is one line that names the problem and points to the help, `--version` is in
the help (issue 16, item 3)."""

import json
import subprocess

from support import ddoctl_path


def ddoctl(daemon, *words: str) -> subprocess.CompletedProcess:
    return subprocess.run([ddoctl_path(), "--daemon", daemon.address, *words],
                          capture_output=True, text=True, timeout=30)


def test_json_presets_name_answers_that_preset(daemon):
    every = json.loads(ddoctl(daemon, "--json", "presets").stdout)
    assert len(every["presets"]) > 1
    done = ddoctl(daemon, "--json", "presets", "WARM_PROCESS")
    assert done.returncode == 0, done.stderr
    one = json.loads(done.stdout)
    assert one["name"] == "warm_process" and one["values"]["DDO_PIN_CPU_MEMORY"] == "1", one
    alias = json.loads(ddoctl(daemon, "--json", "presets", "auto").stdout)
    assert alias["name"] in {preset["name"] for preset in every["presets"]}
    missing = ddoctl(daemon, "--json", "presets", "bogus")
    assert missing.returncode == 2 and missing.stdout == ""
    assert "no preset named 'bogus'" in missing.stderr


def test_a_usage_error_is_one_line(daemon):
    for words in (["--bogus", "status"], ["frobnicate"], ["evict"], ["presets", "a", "b"]):
        done = ddoctl(daemon, *words)
        assert done.returncode == 2, (words, done)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "ddoctl --help" in lines[0], (words, done.stderr)


def test_the_help_names_version_and_nothing_asked_shows_it(daemon):
    help_text = ddoctl(daemon, "--help")
    assert help_text.returncode == 0 and "--version" in help_text.stdout
    version = ddoctl(daemon, "--version")
    assert version.returncode == 0 and version.stdout.startswith("ddoctl ")
    nothing = subprocess.run([ddoctl_path()], capture_output=True, text=True, timeout=30)
    assert nothing.returncode == 2 and "usage: ddoctl" in nothing.stderr


def test_json_numbers_are_numbers_and_enums_short_names(daemon):
    import torch

    from diffusers_dynamic_offloader import DdoClient

    with DdoClient.connect(daemon.address) as client:
        client.register_state_dict("cli/json", {"w": torch.ones(256, 256)})
        status = ddoctl(daemon, "--json", "status")
        assert status.returncode == 0, status.stderr
        info = json.loads(status.stdout)
        assert info["health"] and info["info"]["backend"] == "host", info
        components = json.loads(ddoctl(daemon, "--json", "components").stdout)
        (component,) = [c for c in components["components"]
                        if c["ref"]["cache_key"] == "cli/json"]
        assert component["state"] == "ready"
        assert component["ref"]["total_bytes"] == 256 * 256 * 4  # a number, not "262144"
        stats = json.loads(ddoctl(daemon, "--json", "stats").stdout)
        assert isinstance(stats["pool"]["reserved_bytes"], int), stats["pool"]


def test_status_over_loopback_tcp_checks_the_port_owner(daemon_factory, short_dir):
    """Over TCP, ddoctl checks that the port is held by a trusted user (/proc/net/tcp) before
    it connects to the identity socket GetInfo names (proto/wire daemon_checks)."""
    import os
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    daemon_factory(os.path.join(short_dir, "ddod.sock"), "--listen", f"127.0.0.1:{port}")
    done = subprocess.run([ddoctl_path(), "--daemon", f"127.0.0.1:{port}", "--json", "status"],
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert f"127.0.0.1:{port}" in json.loads(done.stdout)["info"]["listen_addresses"]


def test_evict_names_the_owner_of_a_key(daemon):
    """Keys are names inside each uid (issue 31, finding 4): `evict KEY` is the caller's own
    entry, `evict KEY owner=USER` another user's (ddod refuses it to everyone but its
    administrator: ComponentStore::FindOwnedLocked); an unknown user is a usage error."""
    import os
    import pwd

    import torch

    from diffusers_dynamic_offloader import DdoClient

    me = pwd.getpwuid(os.getuid()).pw_name
    with DdoClient.connect(daemon.address) as client:
        client.register_state_dict("cli/evict-a", {"w": torch.ones(64, 64)})
        client.register_state_dict("cli/evict-b", {"w": torch.ones(64, 64)})
    unknown = ddoctl(daemon, "evict", "cli/evict-a", "owner=no-such-user-ddo")
    assert unknown.returncode == 2, unknown
    assert "no user named 'no-such-user-ddo'" in unknown.stderr, unknown.stderr
    malformed = ddoctl(daemon, "evict", "cli/evict-a", "owner=")
    assert malformed.returncode == 2 and "owner=USER" in malformed.stderr, malformed
    by_name = ddoctl(daemon, "evict", "cli/evict-a", f"owner={me}")
    assert by_name.returncode == 0, by_name.stderr
    assert by_name.stdout.startswith(f"evicted 'cli/evict-a' of {me}: "), by_name.stdout
    by_uid = ddoctl(daemon, "evict", "cli/evict-b", f"owner={os.getuid()}")
    assert by_uid.returncode == 0, by_uid.stderr
    gone = ddoctl(daemon, "evict", "cli/evict-b")
    assert gone.returncode != 0 and "no component 'cli/evict-b'" in gone.stderr, gone
    nobody = ddoctl(daemon, "evict", "cli/evict-b", "owner=4000000")
    assert nobody.returncode != 0 and "for uid 4000000" in nobody.stderr, nobody
