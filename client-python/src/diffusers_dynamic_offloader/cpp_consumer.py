"""The streaming hot path on the C++ ring consumer (``DDO_CLIENT_CONSUMER``).

The per-unit work of :class:`.ring_consumer.RingConsumer` (acquire, release, views of the ring)
costs tens of microseconds of Python per unit on a GPU machine. The same consumer exists in C++
(``client-cpp/src/consumer``, the one ``ddo::client`` runs); a small torch extension
(``client-cpp/python/ddo_consumer_ext.cc``) puts it under the Python client. torch builds the
extension on first use with ``torch.utils.cpp_extension`` (a C++17 compiler, ninja and torch's
headers; on Debian ``g++ ninja-build python3-dev pybind11-dev libtorch-dev``) and caches it in
``$TORCH_EXTENSIONS_DIR`` (default ``~/.cache/torch_extensions``), one build per torch version
and source.

``DDO_CLIENT_CONSUMER`` chooses, once per process:

- ``auto`` (default): the C++ consumer when it loads or builds, else the Python one, with one
  log line saying why;
- ``cpp``: the C++ consumer, or a :class:`ConfigurationError` saying why it cannot be had;
- ``python``: the Python consumer; nothing is built.

``python3 -m diffusers_dynamic_offloader.cpp_consumer --build`` builds it ahead of time (what
``tools/run-tests.sh`` does) and prints where it lies.

The sources come from the installed package (``_cpp_src/``, put there by ddo's install rules)
or from the checkout this package runs from; ``DDO_CLIENT_CPP_SOURCES`` names another root.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import threading
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, List, Mapping, Optional, Sequence, Tuple

import torch

from .errors import (ConfigurationError, DaemonGoneError, DdoError, GraphCaptureError,
                     SessionClosedError, StreamingError)
from .runner_log import logger

if TYPE_CHECKING:
    from .control_block import ControlBlock, Doorbell

MODE_ENV_VAR = "DDO_CLIENT_CONSUMER"
SOURCES_ENV_VAR = "DDO_CLIENT_CPP_SOURCES"
MODES = ("auto", "python", "cpp")

#: What the extension compiles, relative to the source root.
_SOURCES = (
    "client-cpp/src/consumer/control_block.cc",
    "client-cpp/src/consumer/cuda_driver.cc",
    "client-cpp/src/consumer/daemon_liveness.cc",
    "client-cpp/src/consumer/device_stream.cc",
    "client-cpp/src/consumer/ring_consumer.cc",
    "client-cpp/src/consumer/ring_events.cc",
    "client-cpp/src/consumer/ring_views.cc",
    "client-cpp/src/consumer/streamed_linear.cc",
    "client-cpp/python/ddo_consumer_ext.cc",  # last: the slowest to compile
)
#: The headers it includes (part of the build's name, so an edit rebuilds).
_HEADERS = (
    "client-cpp/src/consumer/control_block.h",
    "client-cpp/src/consumer/cuda_driver.h",
    "client-cpp/src/consumer/daemon_liveness.h",
    "client-cpp/src/consumer/device_stream.h",
    "client-cpp/src/consumer/ring_consumer.h",
    "client-cpp/src/consumer/ring_events.h",
    "client-cpp/src/consumer/ring_views.h",
    "client-cpp/src/consumer/streamed_linear.h",
    "client-cpp/include/ddo/status.h",
    "proto/wire/include/ddo/wire/control_layout.h",
    "proto/wire/include/ddo/wire/futex.h",
)
#: Every file of the source root (the install rules copy these into ``_cpp_src``).
SOURCE_FILES = _SOURCES + _HEADERS
_INCLUDE_DIRS = (".", "client-cpp/include", "proto/wire/include")

_lock = threading.Lock()
#: The outcome of this process's one attempt: (extension or None, why not).
_attempt: Optional[Tuple[Optional[ModuleType], str]] = None


class CppConsumerUnavailable(DdoError):
    """The C++ consumer cannot be had here (the message says why)."""


def consumer_mode(environ: Optional[Mapping[str, str]] = None) -> str:
    """``DDO_CLIENT_CONSUMER``, lower-cased; ConfigurationError for another value."""
    source = os.environ if environ is None else environ
    mode = source.get(MODE_ENV_VAR, "").strip().lower() or "auto"
    if mode not in MODES:
        raise ConfigurationError(
            f"{MODE_ENV_VAR}={source.get(MODE_ENV_VAR)!r} is not one of {', '.join(MODES)}")
    return mode


def source_root() -> Path:
    """Where the extension's sources are: ``DDO_CLIENT_CPP_SOURCES``, the package's
    ``_cpp_src``, or the checkout this package runs from. CppConsumerUnavailable if none has
    them all."""
    package = Path(__file__).resolve().parent
    candidates: List[Path] = []
    explicit = os.environ.get(SOURCES_ENV_VAR)
    if explicit:
        candidates.append(Path(explicit))
    else:
        candidates += [package / "_cpp_src", package.parents[2]]
    for root in candidates:
        if all((root / name).is_file() for name in SOURCE_FILES):
            return root
    raise CppConsumerUnavailable(
        "the C++ consumer's sources are not installed with this package (looked in "
        + ", ".join(str(root) for root in candidates) + ")")


def _build_name(root: Path) -> str:
    """One build per source text and torch version."""
    digest = hashlib.sha256(torch.__version__.encode())
    for name in SOURCE_FILES:
        digest.update(name.encode())
        digest.update((root / name).read_bytes())
    return f"ddo_consumer_{digest.hexdigest()[:16]}"


def build(verbose: bool = False) -> ModuleType:
    """Builds (or finds built) and imports the extension; CppConsumerUnavailable with the
    compiler's complaint when it cannot."""
    root = source_root()
    try:
        from torch.utils import cpp_extension
    except ImportError as error:  # a torch without its build helpers
        raise CppConsumerUnavailable(f"torch.utils.cpp_extension is missing: {error}") from None
    flags = ["-O2"]
    if int(torch.__version__.split(".")[0]) < 2:
        flags.append("-std=c++17")  # torch 1.x builds extensions as C++14 by default
    name = _build_name(root)
    if not _built_already(cpp_extension, name):
        logger.info("[ddo] building the C++ ring consumer (once per torch version, about a "
                    "minute; %s=python streams without it)", MODE_ENV_VAR)
    try:
        extension = cpp_extension.load(
            name=name,
            sources=[str(root / source) for source in _SOURCES],
            extra_include_paths=[str(root / directory) for directory in _INCLUDE_DIRS],
            extra_cflags=flags,
            with_cuda=False,  # the CUDA driver is looked up at run time (cuda_driver.cc)
            verbose=verbose,
        )
    except Exception as error:  # a compiler, ninja or headers missing, or a compile error
        text = str(error).strip().splitlines()
        reason = text[-1] if text else type(error).__name__
        raise CppConsumerUnavailable(f"building the C++ consumer failed: {reason}") from error
    extension.init_errors(DdoError, StreamingError, GraphCaptureError, SessionClosedError,
                          DaemonGoneError)
    return extension


def _built_already(cpp_extension: ModuleType, name: str) -> bool:
    """True when the build ``name`` lies in torch's extension cache (a guess, for the log)."""
    try:
        directory = cpp_extension._get_build_directory(name, verbose=False)
    except Exception:  # noqa: B902 - a private helper of torch: no guess
        return True
    return os.path.isfile(os.path.join(directory, f"{name}.so"))


def extension(environ: Optional[Mapping[str, str]] = None) -> Optional[ModuleType]:
    """The extension to stream with, or None for the Python consumer, as
    ``DDO_CLIENT_CONSUMER`` says (see the module documentation). One attempt per process.

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
                _attempt = (build(), "")
            except CppConsumerUnavailable as error:
                _attempt = (None, str(error))
                if mode == "auto":
                    logger.info("[ddo] streaming with the Python consumer: %s "
                                "(%s=python keeps it without trying)", error, MODE_ENV_VAR)
    built, reason = _attempt
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
        prog="python3 -m diffusers_dynamic_offloader.cpp_consumer",
        description="Build the C++ ring consumer of the Python client ahead of its first use.")
    parser.add_argument("--build", action="store_true", help="build it (or find it built)")
    parser.add_argument("--verbose", action="store_true", help="show the compiler's output")
    options = parser.parse_args(argv)
    if not options.build:
        parser.print_help()
        return 2
    try:
        built = build(verbose=options.verbose)
    except CppConsumerUnavailable as error:
        print(f"cpp_consumer: {error}", file=sys.stderr)
        return 1
    print(f"cpp_consumer: {built.__file__}")
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
