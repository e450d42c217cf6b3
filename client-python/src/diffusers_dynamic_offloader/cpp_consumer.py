"""The streaming hot path on the C++ ring consumer (``DDO_CLIENT_CONSUMER``).

The per-unit work of :class:`.ring_consumer.RingConsumer` (acquire, release, views of the ring)
costs tens of microseconds of Python per unit on a GPU machine. The same consumer exists in C++
(``client-cpp/src/consumer``, the one ``ddo::client`` runs); a small torch extension
(``client-cpp/python/ddo_consumer_ext.cc``) puts it under the Python client.

A session finds the extension already built (:mod:`.consumer_build`): first a build shipped in
the installed package (the ``.deb``'s, or what ``pip install`` compiled), then one in the
per-user cache (``~/.cache/ddo/consumer``), each used only when it matches this torch, this
Python and the sources beside it. Loading one is an import: no compiler runs in a session.

``DDO_CLIENT_CONSUMER`` chooses, once per process:

- ``auto`` (default): the C++ consumer when a matching build is there, else the Python one at
  once, with one log line saying why;
- ``cpp``: the C++ consumer; with no matching build it is compiled then, in a child process
  whose output goes to the cache's ``build.log`` (about a minute), and a
  :class:`ConfigurationError` says why when that fails;
- ``python``: the Python consumer; nothing is looked for.

``python3 -m diffusers_dynamic_offloader.cpp_consumer --build`` compiles it into the per-user
cache (what ``tools/run-tests.sh`` does) and prints where it lies; ``--output DIR`` also copies
it with its metadata into ``DIR`` (the package's directory, for the ``.deb`` and ``pip``). The
compiler's output goes to stderr, never stdout.

The sources come from the installed package (``_cpp_src/``, put there by ddo's install rules
and setup.py) or from the checkout this package runs from; ``DDO_CLIENT_CPP_SOURCES`` names
another root.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Iterator, Mapping, Optional, Sequence, Tuple

import torch

from . import byte_cast
from .consumer_build import (BUILD_LOG_NAME, SOURCE_FILES, SOURCES_ENV_VAR,
                             CppConsumerUnavailable, build_cached, cache_directory,
                             expected_metadata, failure_summary, install_build, load_build,
                             package_directory, private_directory, source_hash, source_root)
from .errors import (ConfigurationError, DaemonGoneError, DdoError, GraphCaptureError,
                     SessionClosedError, StreamingError)
from .runner_log import logger

if TYPE_CHECKING:
    from .control_block import ControlBlock, Doorbell

__all__ = ["CppConsumerUnavailable", "MODES", "MODE_ENV_VAR", "SOURCES_ENV_VAR",
           "SOURCE_FILES", "consumer_mode", "extension", "open_consumer", "source_root"]

MODE_ENV_VAR = "DDO_CLIENT_CONSUMER"
MODES = ("auto", "python", "cpp")
#: This module's name for ``python3 -m`` (``__name__`` is ``__main__`` there).
_COMMAND = f"{__package__}.cpp_consumer"
#: How the CLI starts the lines it writes (a child build's log is searched for it).
_CLI_PREFIX = "cpp_consumer: "

_lock = threading.Lock()
#: This process's attempt: (extension or None, why not, whether a build was tried).
_attempt: Optional[Tuple[Optional[ModuleType], str, bool]] = None


def consumer_mode(environ: Optional[Mapping[str, str]] = None) -> str:
    """``DDO_CLIENT_CONSUMER``, lower-cased; ConfigurationError for another value."""
    source = os.environ if environ is None else environ
    mode = source.get(MODE_ENV_VAR, "").strip().lower() or "auto"
    if mode not in MODES:
        raise ConfigurationError(
            f"{MODE_ENV_VAR}={source.get(MODE_ENV_VAR)!r} is not one of {', '.join(MODES)}")
    return mode


def find_built() -> ModuleType:
    """The extension from the package's prebuilt build, else from the per-user cache, set up
    to raise the client's errors; CppConsumerUnavailable saying why neither is usable."""
    root = source_root()
    try:
        expected = expected_metadata(source_hash(root))
    except OSError as error:
        raise CppConsumerUnavailable(f"the C++ consumer's sources are unreadable: {error}") \
            from None
    reasons = []
    for place in ("package", "cache"):
        try:
            if place == "package":
                module = load_build(package_directory(), expected, shared=True)
            else:
                cache = private_directory(cache_directory(), create=False)
                module = load_build(cache / expected["module"], expected, shared=False)
        except (CppConsumerUnavailable, OSError) as error:
            reasons.append(str(error))
            continue
        module.init_errors(DdoError, StreamingError, GraphCaptureError, SessionClosedError,
                           DaemonGoneError)
        byte_cast.install(module)  # the fp8 cast kernel of its streamed Linears
        return module
    raise CppConsumerUnavailable(
        f"no build of the C++ consumer matches torch {torch.__version__} and its sources in "
        f"{root} ({'; '.join(reasons)}); `python3 -m {_COMMAND} --build` builds one")


def build_in_child() -> None:
    """Compiles the extension into the per-user cache in a child interpreter (``--build``),
    its output into the cache's build.log; CppConsumerUnavailable with the failure's line."""
    try:
        log = private_directory(cache_directory(), create=True) / BUILD_LOG_NAME
    except OSError as error:
        raise CppConsumerUnavailable(f"the consumer cache cannot be made: {error}") from None
    if not sys.executable:
        raise CppConsumerUnavailable("this interpreter does not know its executable to build with")
    logger.info("[ddo] building the C++ ring consumer (%s=cpp; once per torch version, about a "
                "minute; the compiler's output goes to %s)", MODE_ENV_VAR, log)
    environment = dict(os.environ)
    paths = [str(package_directory().parent), environment.get("PYTHONPATH", "")]
    environment["PYTHONPATH"] = os.pathsep.join(path for path in paths if path)
    descriptor = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "w") as stream:
        done = subprocess.run([sys.executable, "-m", _COMMAND, "--build"],
                              stdin=subprocess.DEVNULL, stdout=stream, stderr=subprocess.STDOUT,
                              env=environment, check=False)
    if done.returncode != 0:
        output = log.read_text(errors="replace")
        said = [line[len(_CLI_PREFIX):] for line in output.splitlines()
                if line.startswith(_CLI_PREFIX)]
        reason = said[0] if said else failure_summary(output)
        raise CppConsumerUnavailable(f"{reason} (the whole output: {log})")


def extension(environ: Optional[Mapping[str, str]] = None) -> Optional[ModuleType]:
    """The extension to stream with, or None for the Python consumer, as
    ``DDO_CLIENT_CONSUMER`` says (see the module documentation). One attempt per process
    (``cpp`` after a failed ``auto`` attempt builds once more).

    Raises:
        ConfigurationError: the mode is ``cpp`` and the extension cannot be had, or the mode
            is not one of auto, python, cpp.
    """
    global _attempt
    mode = consumer_mode(environ)
    if mode == "python":
        return None
    with _lock:
        if _attempt is None:
            try:
                _attempt = (find_built(), "", False)
            except CppConsumerUnavailable as error:
                _attempt = (None, str(error), False)
                if mode == "auto":
                    logger.info("[ddo] streaming with the Python consumer: %s "
                                "(%s=python keeps it without looking)", error, MODE_ENV_VAR)
        if _attempt[0] is None and mode == "cpp" and not _attempt[2]:
            try:
                source_root()  # no sources: nothing to build, the reason stands
                build_in_child()
                _attempt = (find_built(), "", True)
            except CppConsumerUnavailable as error:
                _attempt = (None, str(error), True)
    built, reason, _ = _attempt
    if built is None and mode == "cpp":
        raise ConfigurationError(f"{MODE_ENV_VAR}=cpp, but {reason}")
    return built


def open_consumer(
    module: ModuleType,
    block: "ControlBlock",
    doorbell: "Doorbell",
    ring: torch.Tensor,
    layouts: Sequence[Sequence[Tuple[str, int, int, torch.dtype, Sequence[int]]]],
    schedule: Sequence[int],
    send_schedule,
    ready_events: Sequence[bytes],
    consumed_events: Sequence[bytes],
    device: torch.device,
):
    """The C++ consumer over the session's mapped block and doorbell and its ring: the
    interface of :class:`.ring_consumer.RingConsumer`, plus ``add_linear`` and ``linear``
    (a streamed Linear's whole forward)."""
    return module.Consumer(
        control=block.address, control_bytes=block.size, control_name=block.name,
        doorbell=doorbell.address, doorbell_bytes=doorbell.size, doorbell_name=doorbell.name,
        slots=block.slots, arena_bytes=block.arena_bytes, ring=ring, layouts=layouts,
        schedule=list(schedule), send_schedule=send_schedule,
        ready_events=list(ready_events), consumed_events=list(consumed_events),
        device=str(device), stall_timeout=block.stall_timeout_ns / 1e9,
    )


def _main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python3 -m {_COMMAND}",
        description="Build the C++ ring consumer of the Python client ahead of its first use, "
                    "into the per-user cache (~/.cache/ddo/consumer). The compiler's output "
                    "goes to stderr; stdout gets the path of the built extension.")
    parser.add_argument("--build", action="store_true", help="build it (or find it built)")
    parser.add_argument("--output", metavar="DIR", type=Path,
                        help="also copy it and its metadata (ddo_consumer.json) into DIR, "
                             "e.g. the installed package's directory")
    parser.add_argument("--verbose", action="store_true", help="show the compiler's output")
    options = parser.parse_args(argv)
    if not options.build:
        parser.print_help()
        return 2
    try:
        with _stdout_to_stderr():
            directory = build_cached(verbose=options.verbose)
            library = install_build(directory, options.output) if options.output \
                else directory / f"{directory.name}.so"
    except (CppConsumerUnavailable, OSError) as error:
        first, _, rest = str(error).partition("\n")
        print(f"{_CLI_PREFIX}{first}", file=sys.stderr)
        if rest:
            print(rest, file=sys.stderr)
        return 1
    print(f"{_CLI_PREFIX}{library}")
    return 0


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """File descriptor 1 goes to stderr meanwhile: what the compiler, ninja or torch's build
    helpers print never reaches stdout."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
