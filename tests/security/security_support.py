"""Host-side helpers of the security suite: throwaway users and groups, a root ddod started the
way deploy/systemd/ddod.service starts it, and running Python programs as another user.

Everything here runs as root in the test process. Not thread-safe (pytest runs tests serially).
"""

from __future__ import annotations

import fcntl
import glob
import grp
import json
import os
import resource
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple, Union

import grpc
import pytest

from diffusers_dynamic_offloader._transport import health_pb2, health_pb2_grpc

#: The directory of this suite (attacker_kit lives here) and the client package's source root.
SUITE_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(SUITE_DIR))
#: DDO_SEC_CLIENT_SOURCE runs the users' programs with another copy of the client (an old
#: release, to show that a client-side defence is what makes a test pass).
CLIENT_SOURCE = os.environ.get("DDO_SEC_CLIENT_SOURCE") or os.path.join(REPO_ROOT, "client-python", "src")

#: Runs a test (through the ``ddod``/``ddod_factory`` fixtures) against a root ddod and
#: against one run as an unprivileged service user, as deploy/systemd/ddod.service runs it.
BOTH_DAEMONS = pytest.mark.parametrize("ddod_user", ["root", "service-user"], indirect=True)

START_TIMEOUT_S = 15.0
#: How fast SIGTERM must stop ddod (the unit gives systemd 15 s; a healthy ddod needs far less).
STOP_TIMEOUT_S = 5.0


@dataclass
class Account:
    """A throwaway user: its name, ids, home directory and whether it is in the socket group."""

    name: str
    uid: int
    gid: int
    home: str
    extra_groups: List[int] = field(default_factory=list)


def random_suffix() -> str:
    return secrets.token_hex(3)


def _run_quietly(args: Sequence[str]) -> None:
    subprocess.run(list(args), check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


class Accounts:
    """Creates users and groups with useradd/groupadd and removes every one it created, even
    when a test failed (``remove``)."""

    def __init__(self, homes_root: str) -> None:
        self.homes_root = homes_root
        self._users: List[str] = []
        self._uids: List[int] = []
        self._groups: List[str] = []

    def group(self, prefix: str) -> int:
        name = f"{prefix}{random_suffix()}"
        _run_quietly(["groupadd", name])
        self._groups.append(name)
        return int(subprocess.check_output(["getent", "group", name]).decode().split(":")[2])

    def user(self, prefix: str, extra_groups: Sequence[int] = ()) -> Account:
        name = f"{prefix}{random_suffix()}"
        home = os.path.join(self.homes_root, name)
        # -U: a private primary group, so no two test users share a group by accident.
        _run_quietly(["useradd", "-M", "-U", "-d", home, "-s", "/usr/sbin/nologin", name])
        self._users.append(name)
        self._groups.append(name)
        entry = subprocess.check_output(["getent", "passwd", name]).decode().split(":")
        uid, gid = int(entry[2]), int(entry[3])
        self._uids.append(uid)
        os.mkdir(home, 0o700)
        os.chown(home, uid, gid)
        return Account(name=name, uid=uid, gid=gid, home=home, extra_groups=list(extra_groups))

    def remove(self) -> List[str]:
        """Removes everything created; returns the problems (never raises)."""
        problems = []
        for name in reversed(self._users):
            result = subprocess.run(["userdel", name], capture_output=True, text=True)
            if result.returncode not in (0, 6):  # 6: no such user
                problems.append(f"userdel {name}: {result.stderr.strip()}")
        for name in reversed(self._groups):
            result = subprocess.run(["groupdel", name], capture_output=True, text=True)
            if result.returncode not in (0, 6):
                problems.append(f"groupdel {name}: {result.stderr.strip()}")
        shutil.rmtree(self.homes_root, ignore_errors=True)
        # Segments a daemon or client of these users left behind (the uids are fresh).
        for uid in self._uids:
            for path in glob.glob(f"/dev/shm/ddo-{uid}-*"):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
        self._uids.clear()
        self._users.clear()
        self._groups.clear()
        return problems


def serving(socket_path: str, timeout: float = 1.0) -> bool:
    """ddod's health check answers SERVING (needs no token)."""
    with grpc.insecure_channel(f"unix:{socket_path}") as channel:
        try:
            response = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(), timeout=timeout)
        except grpc.RpcError:
            return False
    return response.status == health_pb2.HealthCheckResponse.SERVING


def _systemd_sockets(socket_path: str, owner: Optional[Account], group: str) -> list:
    made = []
    for path, kind in ((socket_path, socket.SOCK_STREAM),
                       (socket_path + ".id", socket.SOCK_SEQPACKET)):
        sock = socket.socket(socket.AF_UNIX, kind)
        sock.bind(path)
        os.chown(path, owner.uid if owner is not None else 0, grp.getgrnam(group).gr_gid)
        os.chmod(path, 0o660)
        sock.listen(16)
        made.append(sock)
    return made


def _place_at_3_and_4(fds: Sequence[int]) -> None:
    high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 64) for fd in fds]
    for target, fd in zip((3, 4), high):
        os.dup2(fd, target)


class RootDaemon:
    """A ddod like the systemd unit's: warm_process preset, a socket under /run shared with a
    group, a private state directory; --discard so that its segments go with it. As root by
    default; with ``service_account``, as that unprivileged user (as the unit runs it), whose
    socket directory and state directory are prepared the way systemd would."""

    def __init__(self, binary: str, socket_path: str, group: str, state_dir: str,
                 log_path: str, extra_args: Sequence[str] = (),
                 service_account: Optional[Account] = None,
                 socket_activated: bool = False,
                 nofile: Optional[int] = None) -> None:
        self.socket_path = socket_path
        self.state_dir = state_dir
        self.log_path = log_path
        self.service_account = service_account
        #: What the clients of users need to trust this ddod (``run_as(account, daemon, ...)``
        #: passes it): a ddod run as the service user is trusted only when named.
        self.client_variables: Dict[str, str] = (
            {"DDO_SERVICE_USER": service_account.name} if service_account is not None else {})
        args = [binary, "--preset", "warm_process", "--socket", socket_path,
                "--socket-group", group, "--state-dir", state_dir, "--log-level", "debug",
                "--ram-budget-gb", "1", "--discard", *extra_args]
        # HOME in the private state directory: whatever ddod puts under ~ stays there.
        environment = {name: value for name, value in os.environ.items()
                       if not name.startswith("DDO_") and name != "XDG_RUNTIME_DIR"}
        environment["HOME"] = state_dir
        as_user = {}
        if service_account is not None:
            # systemd's RuntimeDirectory= (owner, group ddo, 0750) and StateDirectory= (0700).
            run_dir = os.path.dirname(socket_path)
            os.makedirs(run_dir, exist_ok=True)
            os.chown(run_dir, service_account.uid, grp.getgrnam(group).gr_gid)
            os.chmod(run_dir, 0o750)
            os.chown(state_dir, service_account.uid, service_account.gid)
            os.chmod(state_dir, 0o700)
            as_user = dict(user=service_account.uid, group=service_account.gid,
                           extra_groups=service_account.extra_groups)
        # Socket activation: root binds the two sockets as ddod.socket would (SocketUser=
        # the service account, SocketGroup=group, 0660) and passes them at descriptors 3, 4.
        self.systemd_sockets = (_systemd_sockets(socket_path, service_account, group)
                                if socket_activated else [])
        launch = {}
        before_exec = []
        if socket_activated:
            args = ["/bin/sh", "-c", 'LISTEN_PID=$$ LISTEN_FDS=2 exec "$0" "$@"', *args]
            fds = [sock.fileno() for sock in self.systemd_sockets]
            launch = dict(pass_fds=(3, 4))
            before_exec.append(lambda: _place_at_3_and_4(fds))
        if nofile is not None:
            # A low RLIMIT_NOFILE (soft and hard: ddod raises the soft one to the hard one), so
            # that a flood test needs hundreds of sockets, not tens of thousands.
            before_exec.append(lambda: resource.setrlimit(resource.RLIMIT_NOFILE,
                                                          (nofile, nofile)))
        if before_exec:
            launch["preexec_fn"] = lambda: [step() for step in before_exec]
        with open(log_path, "wb") as log:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                         env=environment, **as_user, **launch)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (os.path.exists(socket_path) and serving(socket_path)):
            if self.proc.poll() is not None:
                raise RuntimeError(f"ddod exited with {self.proc.returncode} at start:\n{self.log()}")
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"ddod did not serve within {START_TIMEOUT_S} s:\n{self.log()}")
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def uid(self) -> int:
        """The real uid ddod runs as."""
        with open(f"/proc/{self.pid}/status") as status:
            return int(next(line for line in status if line.startswith("Uid:")).split()[1])

    def running(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as log:
            return log.read()

    def log_bytes(self) -> bytes:
        with open(self.log_path, "rb") as log:
            return log.read()

    def stop(self, timeout: float = STOP_TIMEOUT_S) -> Optional[float]:
        """SIGTERM; the seconds ddod took to exit, or None when it did not exit within
        ``timeout`` (it is then killed)."""
        if self.proc.poll() is not None:
            return 0.0
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        return time.monotonic() - started

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def remove_segments(self) -> None:
        """Removes what a killed ddod left in /dev/shm (a clean one removes them itself)."""
        for pool in glob.glob(os.path.join(self.state_dir, "pool-*")):
            namespace = os.path.basename(pool)[len("pool-"):]
            for path in glob.glob(f"/dev/shm/ddo-*-{glob.escape(namespace)}-*"):
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass


def _daemon_socket(daemon: Union[RootDaemon, str]) -> Tuple[str, Dict[str, str]]:
    """The socket of ``daemon`` (a ``RootDaemon`` or a socket path) and what clients need to
    trust it."""
    if isinstance(daemon, RootDaemon):
        return daemon.socket_path, dict(daemon.client_variables)
    return daemon, {}


def child_environment(account: Account, daemon: Union[RootDaemon, str],
                      **variables: str) -> Dict[str, str]:
    """A minimal environment for a program run as ``account`` against ``daemon`` (a
    ``RootDaemon``, whose clients' variables it carries, or a socket path): no
    XDG_RUNTIME_DIR, no DDO_* of the developer."""
    socket_path, daemon_variables = _daemon_socket(daemon)
    environment = {
        "PATH": "/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": account.home,
        "USER": account.name,
        "LOGNAME": account.name,
        "PYTHONPATH": f"{CLIENT_SOURCE}:{SUITE_DIR}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "DDO_SEC_SOCKET": socket_path,
    }
    if os.environ.get("DDO_DDOD_BINARY"):
        environment["DDO_DDOD_BINARY"] = os.path.abspath(os.environ["DDO_DDOD_BINARY"])
    # A bundled ddod (tools/bundle.sh, on the GPU machine) finds its libraries there.
    if os.environ.get("LD_LIBRARY_PATH"):
        environment["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
    environment.update(daemon_variables)
    environment.update(variables)
    return environment


class ProgramFailed(AssertionError):
    """A program run as another user did not print a RESULT line."""


def _as_user(account: Account) -> dict:
    return dict(user=account.uid, group=account.gid, extra_groups=account.extra_groups,
                cwd=account.home)


def run_as(account: Account, daemon: Union[RootDaemon, str], code: str, timeout: float = 60.0,
           **variables: str) -> dict:
    """Runs ``code`` (Python; ``from attacker_kit import *`` is prepended) as ``account``
    against ``daemon`` (see ``child_environment``) and returns the dict it passed to
    ``report``."""
    program = "from attacker_kit import *\n" + textwrap.dedent(code)
    result = subprocess.run(
        [sys.executable, "-c", program], env=child_environment(account, daemon, **variables),
        capture_output=True, text=True, timeout=timeout, **_as_user(account))
    return parse_result(result.stdout, result.stderr, result.returncode)


def parse_result(stdout: str, stderr: str, returncode: Optional[int]) -> dict:
    for line in reversed(stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    raise ProgramFailed(f"the program printed no RESULT (exit {returncode}):\n"
                        f"stdout:\n{stdout[-4000:]}\nstderr:\n{stderr[-4000:]}")


def start_as(account: Account, daemon: Union[RootDaemon, str], code: str,
             args: Sequence[str] = (), **variables: str) -> subprocess.Popen:
    """Starts ``code`` (or, with ``args``, that command) as ``account`` against ``daemon``
    (see ``child_environment``) in the background; stdin and stdout are pipes for talking
    to it."""
    command = list(args) or [sys.executable, "-c", "from attacker_kit import *\n" +
                             textwrap.dedent(code)]
    return subprocess.Popen(command, env=child_environment(account, daemon, **variables),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            **_as_user(account))


def stop_process(proc: subprocess.Popen) -> None:
    """Ends a process started with ``start_as`` (its own session) and reaps it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            continue
    proc.wait(10)


def assert_still_serving(daemon: RootDaemon) -> None:
    """ddod survived the attack and still answers its health check."""
    assert daemon.running(), f"ddod died (exit {daemon.proc.returncode}); log tail:\n{daemon.log()[-3000:]}"
    assert serving(daemon.socket_path, timeout=5), "ddod no longer answers its health check"


def root_only_file(directory: str, name: str, content: bytes) -> str:
    """A file only root may read (0600 in a 0700 directory owned by root)."""
    os.makedirs(directory, mode=0o700, exist_ok=True)
    os.chmod(directory, 0o700)
    path = os.path.join(directory, name)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as out:
        out.write(content)
    return path


def wait_for(predicate, timeout: float, interval: float = 0.05) -> bool:
    """Polls ``predicate`` until true (True) or until ``timeout`` passes (False)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)
    return True
