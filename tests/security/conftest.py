"""Fixtures of the security suite (issue 13): a root ddod shared with a group, and throwaway
users that attack it.

The suite needs root (it creates users and groups with useradd/groupadd and runs programs as
them); without root every test is skipped with the reason. The ddod under test is
DDO_DDOD_BINARY, started like deploy/systemd/ddod.service (--preset warm_process, a socket under
/run, --socket-group) with a private state directory, one fresh ddod per test.

Accounts (session-wide, removed at the end even after failures):
- ``attacker``: a member of the socket group, the hostile user of the findings;
- ``victim``: another member of the socket group;
- ``outsider``: a local user outside the group;
- ``service_account``: the unprivileged user a service ddod runs as (a member of the group,
  as the unit's ``ddo``), created when a test first needs it.

The t3 tests (issue 31) run twice (``security_support.BOTH_DAEMONS``): against a root ddod and
against one run as the service user (``ddod_user`` "root" or "service-user").
"""

from __future__ import annotations

import os
import shutil
import tempfile
from typing import Iterator, Optional

import pytest

from attacker_kit import Ddo
from security_support import Account, Accounts, RootDaemon, random_suffix


def pytest_collection_modifyitems(config: pytest.Config, items) -> None:
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(
        reason="the security suite runs as root: it creates throwaway users and groups "
               "(useradd/groupadd) and runs clients as them; CI runs it as root")
    suite = os.path.dirname(os.path.abspath(__file__))
    for item in items:
        if str(item.fspath).startswith(suite):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def ddod_binary() -> str:
    path = os.environ.get("DDO_DDOD_BINARY")
    if not path:
        pytest.fail("DDO_DDOD_BINARY is not set: build ddod (tools/build.sh) and run "
                    "DDO_DDOD_BINARY=build/bin/ddod PYTHONPATH=client-python/src "
                    "/usr/bin/python3 -m pytest tests/security", pytrace=False)
    path = os.path.abspath(path)
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"DDO_DDOD_BINARY={path!r} is not an executable file", pytrace=False)
    return path


@pytest.fixture(scope="session")
def accounts() -> Iterator[Accounts]:
    homes = tempfile.mkdtemp(prefix="ddo-sec-homes-", dir="/tmp")
    os.chmod(homes, 0o755)
    created = Accounts(homes)
    try:
        yield created
    finally:
        problems = created.remove()
        assert not problems, f"removing the throwaway accounts failed: {problems}"


@pytest.fixture(scope="session")
def socket_group(accounts: Accounts) -> int:
    """The gid of the group ddod shares its socket with."""
    return accounts.group("ddosecg")


@pytest.fixture(scope="session")
def socket_group_name(socket_group: int) -> str:
    import grp

    return grp.getgrgid(socket_group).gr_name


@pytest.fixture(scope="session")
def attacker(accounts: Accounts, socket_group: int) -> Account:
    return accounts.user("ddoatk", extra_groups=[socket_group])


@pytest.fixture(scope="session")
def victim(accounts: Accounts, socket_group: int) -> Account:
    return accounts.user("ddovic", extra_groups=[socket_group])


@pytest.fixture(scope="session")
def outsider(accounts: Accounts) -> Account:
    return accounts.user("ddoout")


@pytest.fixture(scope="session")
def service_account(accounts: Accounts, socket_group: int) -> Account:
    return accounts.user("ddosvc", extra_groups=[socket_group])


@pytest.fixture
def ddod_user(request) -> str:
    """Who the ddods of ``ddod_factory`` run as: "root" unless a test is parametrized
    (``BOTH_DAEMONS``) with "service-user"."""
    return getattr(request, "param", "root")


@pytest.fixture
def ddod_factory(request, ddod_binary: str, socket_group_name: str, ddod_user: str):
    """``start(socket_path=None, *extra_args, nofile=None)`` starts a ddod as ``ddod_user``:
    root, or the service account with its socket directory and state directory prepared as
    systemd would (default socket: /run/ddo-sec-<rand>/ddod.sock; a root ddod creates the
    directory itself; ``nofile``: its RLIMIT_NOFILE, soft and hard). Pass the daemon to
    ``run_as``/``start_as`` so that its clients trust it. Afterwards each one must stop within
    a few seconds of SIGTERM."""
    assert ddod_user in ("root", "service-user"), ddod_user
    service = (request.getfixturevalue("service_account") if ddod_user == "service-user"
               else None)
    started = []
    cleanup_dirs = []

    def start(socket_path: str = "", *extra_args: str, nofile: Optional[int] = None) -> RootDaemon:
        if not socket_path:
            run_dir = f"/run/ddo-sec-{random_suffix()}"
            cleanup_dirs.append(run_dir)
            socket_path = os.path.join(run_dir, "ddod.sock")
        state_dir = tempfile.mkdtemp(prefix="ddo-sec-state-", dir="/tmp")
        cleanup_dirs.append(state_dir)
        daemon = RootDaemon(ddod_binary, socket_path, socket_group_name, state_dir,
                            os.path.join(state_dir, "ddod.log"), extra_args,
                            service_account=service, nofile=nofile)
        started.append(daemon)
        expected = service.uid if service is not None else 0
        assert daemon.uid() == expected, f"ddod runs as uid {daemon.uid()}, not {expected}"
        return daemon

    yield start
    slow = []
    for daemon in started:
        seconds = daemon.stop()
        if seconds is None:
            slow.append(daemon.log()[-3000:])
        daemon.remove_segments()
    for path in cleanup_dirs:
        shutil.rmtree(path, ignore_errors=True)
    assert not slow, f"ddod did not stop within a few seconds of SIGTERM; log tail:\n{slow[0]}"


@pytest.fixture
def ddod(ddod_factory) -> RootDaemon:
    """A ddod like the systemd unit's, on a socket shared with the group: root's, or the
    service account's (``ddod_user``)."""
    return ddod_factory()


@pytest.fixture
def admin(ddod: RootDaemon) -> Iterator[Ddo]:
    """The test process itself talking to ``ddod`` as root (an admin, whether ddod runs as
    root or as the service user)."""
    connection = Ddo(ddod.socket_path)
    yield connection
    connection.close()
