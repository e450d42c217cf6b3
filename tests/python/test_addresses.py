"""DDO_DAEMON parsing and the default socket candidates (no daemon needed)."""

import pytest

from diffusers_dynamic_offloader import ConfigurationError, DdoClient, DdoError
from diffusers_dynamic_offloader.addresses import (
    DaemonAddress,
    Discovery,
    check_socket_location,
    check_tcp_listener,
    default_socket_candidates,
    parse_daemon_location,
    per_user_directory,
    resolve_daemon_location,
    trusted_daemon_uids,
)
from diffusers_dynamic_offloader.errors import UntrustedDaemonError

SYSTEM = "unix:/run/ddo/ddod.sock"


def targets(location):
    return [address.target for address in location.candidates]


def test_default_candidates_with_xdg_runtime_dir():
    candidates = default_socket_candidates({"XDG_RUNTIME_DIR": "/run/user/1000"}, uid=1000)
    assert [c.target for c in candidates] == ["unix:/run/user/1000/ddo/ddod.sock", SYSTEM]
    assert candidates[0].socket_path == "/run/user/1000/ddo/ddod.sock"


def test_default_candidates_without_xdg_runtime_dir():
    for environ in ({}, {"XDG_RUNTIME_DIR": ""}):
        candidates = default_socket_candidates(environ, uid=1234)
        assert [c.target for c in candidates] == ["unix:/tmp/ddo-1234/ddod.sock", SYSTEM]


def test_default_candidates_for_root():
    candidates = default_socket_candidates({"XDG_RUNTIME_DIR": "/run/user/0"}, uid=0)
    assert [c.target for c in candidates] == [SYSTEM]


@pytest.mark.parametrize("value", [None, "", "auto", " AUTO "])
def test_auto(value):
    environ = {"XDG_RUNTIME_DIR": "/x"}
    location = parse_daemon_location(value, environ=environ)
    assert location.discovery is Discovery.AUTO
    assert location.candidates == default_socket_candidates(environ)


def test_embedded():
    location = parse_daemon_location("embedded")
    assert location.discovery is Discovery.EMBEDDED
    assert location.candidates == ()


@pytest.mark.parametrize(
    "value, target",
    [
        ("unix:/run/ddo/ddod.sock", "unix:/run/ddo/ddod.sock"),
        ("unix:///run/ddo/ddod.sock", "unix:/run/ddo/ddod.sock"),
        ("/run/ddo/ddod.sock", "unix:/run/ddo/ddod.sock"),
        ("127.0.0.1:50051", "127.0.0.1:50051"),
        ("localhost:50051", "localhost:50051"),
        ("[::1]:50051", "[::1]:50051"),
    ],
)
def test_fixed_addresses(value, target):
    location = parse_daemon_location(value)
    assert location.discovery is Discovery.FIXED
    assert targets(location) == [target]


def test_unix_address_keeps_the_socket_path():
    assert DaemonAddress.unix("/a/b.sock") == DaemonAddress("unix:/a/b.sock", "/a/b.sock")
    assert parse_daemon_location("unix:///a/b.sock").candidates[0].socket_path == "/a/b.sock"
    assert parse_daemon_location("[::1]:5").candidates[0].socket_path is None


@pytest.mark.parametrize(
    "value",
    [
        "tcp://127.0.0.1:50051",
        "relative/ddod.sock",
        "unix:relative.sock",
        "unix://host/ddod.sock",
        "localhost",
        "localhost:0",
        "localhost:70000",
        "[not-v6]:50051",
        "host name:50051",
        "/" + "x" * 120,
    ],
)
def test_invalid_values_name_the_setting(value):
    with pytest.raises(ConfigurationError) as raised:
        parse_daemon_location(value)
    message = str(raised.value)
    assert "DDO_DAEMON" in message and repr(value) in message
    assert "unix:/abs/path.sock" in message and "host:port" in message  # the accepted forms
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, DdoError)


def test_environment_variable_is_read(monkeypatch):
    monkeypatch.setenv("DDO_DAEMON", "unix:/a.sock")
    assert targets(resolve_daemon_location()) == ["unix:/a.sock"]
    # An explicit address wins over DDO_DAEMON.
    assert targets(resolve_daemon_location("/b.sock")) == ["unix:/b.sock"]


def test_invalid_ddo_daemon_fails_connect(monkeypatch):
    monkeypatch.setenv("DDO_DAEMON", "tcp:nowhere")
    with pytest.raises(ConfigurationError, match=r"DDO_DAEMON='tcp:nowhere'"):
        DdoClient.connect()
    with pytest.raises(ConfigurationError, match=r"address='bad address'"):
        DdoClient.connect("bad address")


# Who may serve this client, and where its socket may be.


def test_trusted_uids_are_the_user_root_and_the_service_user():
    import pwd

    assert trusted_daemon_uids({}, uid=1234)[:2] == (1234, 0)
    assert trusted_daemon_uids({"DDO_SERVICE_USER": "no-such-user-here"}, uid=1234) == (1234, 0)
    root_named = trusted_daemon_uids({"DDO_SERVICE_USER": "daemon"}, uid=1234)
    assert root_named == (1234, 0, pwd.getpwnam("daemon").pw_uid)


def test_the_per_user_directory():
    assert per_user_directory(1234) == "/tmp/ddo-1234"
    assert default_socket_candidates({}, uid=1234)[0].socket_path == "/tmp/ddo-1234/ddod.sock"


def _listening_socket(path):
    import socket

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    return listener


def test_socket_files_of_untrusted_users_are_refused(tmp_path):
    import os

    directory = tmp_path / "run"
    directory.mkdir(mode=0o700)
    path = str(directory / "ddod.sock")
    check_socket_location(path)  # nothing there yet: nothing to refuse
    with _listening_socket(path):
        check_socket_location(path)
        if os.geteuid() == 0:  # a socket another user owns (only root can make one here)
            os.chown(path, 54321, 54321, follow_symlinks=False)
            with pytest.raises(UntrustedDaemonError, match=r"it is a socket owned by uid 54321"):
                check_socket_location(path)
    os.unlink(path)
    os.symlink("/run/ddo/ddod.sock", path)  # a link is not followed
    with pytest.raises(UntrustedDaemonError, match="symbolic link"):
        check_socket_location(path)


def test_a_world_writable_socket_directory_is_refused(tmp_path):
    directory = tmp_path / "open"
    directory.mkdir()
    directory.chmod(0o777)
    with pytest.raises(UntrustedDaemonError) as raised:
        check_socket_location(str(directory / "ddod.sock"))
    assert str(directory) in str(raised.value) and "mode 0777" in str(raised.value)


def test_the_owner_of_a_tcp_port_is_checked():
    import os
    import socket

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        address = DaemonAddress(f"127.0.0.1:{listener.getsockname()[1]}")
        check_tcp_listener(address)  # this process's own listener
        with pytest.raises(UntrustedDaemonError, match=f"held by uid {os.getuid()}"):
            check_tcp_listener(address, trusted_uids=(os.getuid() + 1,))
    with pytest.raises(UntrustedDaemonError, match="no listener"):
        check_tcp_listener(address)


def test_the_owners_of_a_port_are_known_before_it_is_dialed():
    import os
    import socket

    from diffusers_dynamic_offloader.addresses import tcp_listener_owners

    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        assert tcp_listener_owners(port) == [os.getuid()]
    assert tcp_listener_owners(port) == []
