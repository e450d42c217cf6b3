"""Where the C++ consumer's torch extension comes from: its sources, its builds and their
metadata (the choice between them is :mod:`.cpp_consumer`'s).

A build is a directory holding ``<module>.so`` and ``ddo_consumer.json``: the module name,
the torch version, the Python ABI and the hash of the sources it was compiled from. Builds lie
in two places:

- *prebuilt*: the installed package's own directory, written by
  ``python3 -m diffusers_dynamic_offloader.cpp_consumer --build --output DIR`` (the ``.deb``
  and ``pip install`` run it);
- *the per-user cache*: ``$XDG_CACHE_HOME/ddo/consumer/<module>/`` (default
  ``~/.cache/ddo/consumer``), where ``--build`` compiles. The cache must be a directory of this
  user, closed to everyone else (0700): another user's extension would run as this one. torch's
  shared ``$TORCH_EXTENSIONS_DIR`` (and its default ``~/.cache/torch_extensions``) is never
  used, to build or to load.

Either way a build is loaded only through a real path every directory of which belongs to
root or this user and is writable by no one else (a sticky directory above it will do), so
that no other user can plant or swap the ``.so`` (issue 31).

Loading a build imports the ``.so`` and nothing else: no compiler, no ninja, not even
``torch.utils.cpp_extension`` (whose import alone prints to the runner's output). Compiling
happens in :func:`build_cached`, which only the ``--build`` command runs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import stat
import sys
import sysconfig
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Dict, List

import torch

from .errors import DdoError

SOURCES_ENV_VAR = "DDO_CLIENT_CPP_SOURCES"

#: What the extension compiles, relative to the source root.
SOURCES = (
    "client-cpp/src/consumer/byte_cast.cc",
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
#: The headers it includes (part of the source hash, so an edit makes a build stale).
HEADERS = (
    "client-cpp/src/consumer/byte_cast.h",
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
#: Every file of the source root (the install rules and setup.py copy these into ``_cpp_src``).
SOURCE_FILES = SOURCES + HEADERS
INCLUDE_DIRS = (".", "client-cpp/include", "proto/wire/include")

#: A build's metadata file, beside its ``.so``.
METADATA_NAME = "ddo_consumer.json"
#: The full output of the last build the client started itself, in the cache.
BUILD_LOG_NAME = "build.log"
_PACKAGE = Path(__file__).resolve().parent


class CppConsumerUnavailable(DdoError):
    """The C++ consumer cannot be had here (the message says why)."""


def package_directory() -> Path:
    """Where a prebuilt extension ships: the installed package's own directory."""
    return _PACKAGE


def source_root() -> Path:
    """Where the extension's sources are: ``DDO_CLIENT_CPP_SOURCES``, the package's
    ``_cpp_src``, or the checkout this package runs from. CppConsumerUnavailable if none has
    them all."""
    candidates: List[Path] = []
    explicit = os.environ.get(SOURCES_ENV_VAR)
    if explicit:
        candidates.append(Path(explicit))
    else:
        candidates += [_PACKAGE / "_cpp_src", _PACKAGE.parents[2]]
    for root in candidates:
        if all((root / name).is_file() for name in SOURCE_FILES):
            return root
    raise CppConsumerUnavailable(
        "the C++ consumer's sources are not installed with this package (looked in "
        + ", ".join(str(root) for root in candidates) + ")")


def source_hash(root: Path) -> str:
    """The hash of the sources' names and text."""
    digest = hashlib.sha256()
    for name in SOURCE_FILES:
        digest.update(name.encode() + b"\0")
        digest.update((root / name).read_bytes())
    return digest.hexdigest()


def python_abi() -> str:
    """The running interpreter's extension ABI, e.g. ``cpython-311-x86_64-linux-gnu``."""
    return str(sysconfig.get_config_var("SOABI") or sys.implementation.cache_tag)


def expected_metadata(sources: str) -> Dict[str, str]:
    """What a build for this interpreter, this torch and the sources hashed ``sources`` says
    about itself, its module name included (one name per torch, ABI and source text)."""
    fields = {"torch": torch.__version__,
              "torch_git": str(getattr(torch.version, "git_version", "")),
              "python_abi": python_abi(), "source_hash": sources}
    name = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    return dict(fields, module=f"ddo_consumer_{name}")


def cache_directory() -> Path:
    """The per-user cache of builds: ``$XDG_CACHE_HOME/ddo/consumer``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ddo" / "consumer"


def private_directory(path: Path, create: bool) -> Path:
    """``path`` once checked to be a directory (not a link) of this user that no one else may
    enter; with ``create``, made 0700 when missing. CppConsumerUnavailable otherwise."""
    if create and not os.path.lexists(path):
        os.makedirs(path.parent, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass  # another process made it meanwhile: checked below like any other
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        raise CppConsumerUnavailable(f"the consumer cache {path} does not exist") from None
    problem = ""
    if not stat.S_ISDIR(status.st_mode):
        problem = "is not a directory"
    elif status.st_uid != os.geteuid():
        problem = f"belongs to uid {status.st_uid}, not to this user ({os.geteuid()})"
    elif status.st_mode & 0o077:
        problem = (f"is open to other users (mode {stat.S_IMODE(status.st_mode):04o}; "
                   "it must be 0700)")
    if problem:
        raise CppConsumerUnavailable(
            f"the consumer cache {path} {problem}: an extension there could be another "
            "user's, so none is built or loaded from it")
    return path


def load_build(directory: Path, expected: Dict[str, str], shared: bool) -> ModuleType:
    """Imports the build in ``directory`` when its metadata matches ``expected``.
    ``shared``: a directory others may read (the package's), where the files must belong to
    root or this user and be writable by no one else. CppConsumerUnavailable saying why not."""
    try:
        with open(directory / METADATA_NAME, encoding="utf-8") as stream:
            found = json.load(stream)
    except FileNotFoundError:
        raise CppConsumerUnavailable(f"{directory} holds no build") from None
    except (OSError, ValueError) as error:
        raise CppConsumerUnavailable(f"{directory / METADATA_NAME} is unreadable: {error}") \
            from None
    if not isinstance(found, dict):
        raise CppConsumerUnavailable(f"{directory / METADATA_NAME} is not a JSON object")
    for field in ("torch", "torch_git", "python_abi", "source_hash", "module"):
        if found.get(field) != expected[field]:
            raise CppConsumerUnavailable(
                f"the build in {directory} is stale: its {field} is {found.get(field)!r}, "
                f"this client needs {expected[field]!r}")
    # Loaded through its real path, every directory of which is root's or this user's and
    # closed to others: nobody else can swap the files between the checks and the import.
    directory = _trusted_directory(directory)
    library = directory / f"{expected['module']}.so"
    if shared:
        _check_not_planted(directory / METADATA_NAME)
        _check_not_planted(library)
    if not library.is_file():
        raise CppConsumerUnavailable(f"{library} is missing")
    spec = importlib.util.spec_from_file_location(expected["module"], library)
    if spec is None or spec.loader is None:
        raise CppConsumerUnavailable(f"{library} is not a loadable extension")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError as error:
        raise CppConsumerUnavailable(f"{library} does not load: {error}") from None
    return module


def _trusted_directory(directory: Path) -> Path:
    """``directory``'s real path once it and every directory above it are root's or this
    user's and writable by no one else (above it, a sticky directory such as /tmp will do:
    nobody else can rename what is ours in it). CppConsumerUnavailable otherwise: a shared
    package directory (a group-writable venv, say) is never loaded from."""
    real = Path(os.path.realpath(directory))
    for path in (real, *real.parents):
        try:
            status = os.lstat(path)
        except OSError as error:
            raise CppConsumerUnavailable(f"{path} cannot be checked: {error.strerror}") \
                from None
        mode = stat.S_IMODE(status.st_mode)
        sticky_above = path != real and status.st_mode & stat.S_ISVTX
        if status.st_uid not in (0, os.geteuid()) or (mode & 0o022 and not sticky_above):
            raise CppConsumerUnavailable(
                f"{path} is not trusted (uid {status.st_uid}, mode {mode:04o}): an extension "
                f"in {real} could be another user's, so none is loaded from it (every "
                "directory above an extension must be root's or this user's and writable by "
                "no one else)")
    return real


def _check_not_planted(path: Path) -> None:
    """A file of a shared directory: root's or this user's, and writable by no one else."""
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return  # reported by the caller
    if status.st_uid not in (0, os.geteuid()) or status.st_mode & 0o022 \
            or not stat.S_ISREG(status.st_mode):
        raise CppConsumerUnavailable(
            f"{path} is not trusted (uid {status.st_uid}, mode "
            f"{stat.S_IMODE(status.st_mode):04o}): it must be a file of root or of this user "
            "that no one else can write")


def build_cached(verbose: bool = False) -> Path:
    """Compiles the extension into the per-user cache unless a matching build is there; the
    build's directory. The compiler's output goes to stdout with ``verbose``, else into the
    error; CppConsumerUnavailable when it fails."""
    root = source_root()
    expected = expected_metadata(source_hash(root))
    directory = private_directory(cache_directory(), create=True) / expected["module"]
    try:
        load_build(directory, expected, shared=False)
        return directory
    except CppConsumerUnavailable:
        pass
    try:
        from torch.utils import cpp_extension
    except ImportError as error:  # a torch without its build helpers
        raise CppConsumerUnavailable(f"torch.utils.cpp_extension is missing: {error}") from None
    os.makedirs(directory, 0o700, exist_ok=True)
    flags = ["-O2"]
    if int(torch.__version__.split(".")[0]) < 2:
        flags.append("-std=c++17")  # torch 1.x builds extensions as C++14 by default
    try:
        cpp_extension.load(
            name=expected["module"],
            sources=[str(root / source) for source in SOURCES],
            extra_include_paths=[str(root / folder) for folder in INCLUDE_DIRS],
            extra_cflags=flags,
            build_directory=str(directory),
            with_cuda=False,  # the CUDA driver is looked up at run time (cuda_driver.cc)
            verbose=verbose,
        )
    except Exception as error:  # a compiler, ninja or headers missing, or a compile error
        raise CppConsumerUnavailable(
            f"building the C++ consumer failed: {failure_summary(str(error))}\n{error}") \
            from None
    write_metadata(directory, expected)
    return directory


def failure_summary(output: str) -> str:
    """The line of a build's output that says what went wrong: its first ``error`` line,
    else its last line."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in lines:
        if "error" in line.lower() and not line.startswith("Error building extension"):
            return line
    return lines[-1] if lines else "no output"


def write_metadata(directory: Path, metadata: Dict[str, str]) -> None:
    """Writes ``ddo_consumer.json`` in one step (a reader sees the old file or the new)."""
    descriptor, temporary = tempfile.mkstemp(prefix=".ddo_consumer.", dir=directory)
    with os.fdopen(descriptor, "w", encoding="utf-8") as stream:
        json.dump(metadata, stream, indent=2, sort_keys=True)
        stream.write("\n")
    os.chmod(temporary, 0o644)
    os.replace(temporary, directory / METADATA_NAME)


def install_build(build: Path, output: Path) -> Path:
    """Copies the build in ``build`` (a cache directory) into ``output`` with its metadata,
    replacing a build there before; the ``.so`` written."""
    with open(build / METADATA_NAME, encoding="utf-8") as stream:
        metadata = json.load(stream)
    output.mkdir(parents=True, exist_ok=True)
    library = output / f"{metadata['module']}.so"
    previous = _previous_module(output)
    descriptor, temporary = tempfile.mkstemp(prefix=".ddo_consumer.", suffix=".so", dir=output)
    os.close(descriptor)
    shutil.copyfile(build / library.name, temporary)
    os.chmod(temporary, 0o644)
    os.replace(temporary, library)
    write_metadata(output, metadata)
    if previous and previous != metadata["module"]:
        (output / f"{previous}.so").unlink(missing_ok=True)
    return library


def _previous_module(output: Path) -> str:
    """The module name of the build ``output`` holds now, or ''."""
    try:
        with open(output / METADATA_NAME, encoding="utf-8") as stream:
            module = json.load(stream).get("module", "")
    except (OSError, ValueError, AttributeError):
        return ""
    return module if isinstance(module, str) and module.startswith("ddo_consumer_") \
        and "/" not in module else ""
