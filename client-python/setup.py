"""The package's build steps beyond pyproject.toml: the C++ consumer's sources and, where it
can be compiled, the built extension.

- ``sdist`` puts the consumer's sources (``client-cpp/...``, ``proto/wire/...`` of the
  checkout, the files ``consumer_build.SOURCE_FILES`` names) under
  ``src/diffusers_dynamic_offloader/_cpp_src/``, where an unpacked sdist finds them again.
- ``build_py`` (what a wheel and ``pip install`` run) copies them into the built package's
  ``_cpp_src/`` and then runs ``python -m diffusers_dynamic_offloader.cpp_consumer --build
  --output <built package>``: with torch and a C++ compiler present (``pip install
  --no-build-isolation``), the wheel carries the compiled extension for that torch and Python,
  and a first session loads it instead of compiling. Without them, or with
  ``DDO_BUILD_CONSUMER=0``, the package is built without it (the client then streams with the
  Python consumer until ``--build`` is run). The compiler's output goes to stderr.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Optional, Tuple

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = Path(__file__).resolve().parent
PACKAGE = "diffusers_dynamic_offloader"
CPP_SRC = Path("src") / PACKAGE / "_cpp_src"
#: DDO_BUILD_CONSUMER=0: package the sources only, compile nothing.
BUILD_ENV_VAR = "DDO_BUILD_CONSUMER"


def source_files() -> Tuple[str, ...]:
    """``SOURCE_FILES`` of consumer_build.py, read without importing the package (torch)."""
    tree = ast.parse((HERE / "src" / PACKAGE / "consumer_build.py").read_text())
    lists = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) \
                and node.targets[0].id in ("SOURCES", "HEADERS"):
            lists[node.targets[0].id] = ast.literal_eval(node.value)
    return tuple(lists["SOURCES"]) + tuple(lists["HEADERS"])


def source_root() -> Optional[Path]:
    """Where the sources are: an unpacked sdist's ``_cpp_src``, else the checkout around
    client-python; None when neither has them all."""
    for root in (HERE / CPP_SRC, HERE.parent):
        if all((root / name).is_file() for name in source_files()):
            return root
    return None


def copy_sources(target: Path) -> bool:
    """Copies the sources into ``target`` in their checkout layout; False when there are
    none to copy."""
    root = source_root()
    if root is None:
        return False
    for name in source_files():
        destination = target / name
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / name, destination)
    return True


def will_build_extension() -> bool:
    """Whether the extension is compiled into the package: not turned off, and torch and a
    C++ compiler at hand."""
    if os.environ.get(BUILD_ENV_VAR, "1") == "0":
        return False
    compiler = os.environ.get("CXX") or "c++"
    return importlib.util.find_spec("torch") is not None and shutil.which(compiler) is not None \
        and source_root() is not None


class BuildPy(build_py):
    """The package, its consumer sources and, where it can be built, the extension."""

    def run(self) -> None:
        super().run()
        package = Path(self.build_lib) / PACKAGE
        if not copy_sources(package / "_cpp_src"):
            print(f"{PACKAGE}: the C++ consumer's sources are not here; the package streams "
                  "with the Python consumer", file=sys.stderr)
            return
        if will_build_extension():
            self.build_extension(package)

    @staticmethod
    def build_extension(package: Path) -> None:
        environment = dict(os.environ, PYTHONPATH=str(package.parent),
                           PYTHONDONTWRITEBYTECODE="1")
        environment.pop("DDO_CLIENT_CPP_SOURCES", None)  # the sources just copied
        done = subprocess.run(
            [sys.executable, "-m", f"{PACKAGE}.cpp_consumer", "--build", "--output",
             str(package)], stdout=sys.stderr, stderr=sys.stderr, env=environment, check=False)
        if done.returncode != 0:
            print(f"{PACKAGE}: the C++ consumer was not built (see above); the package "
                  "streams with the Python consumer until `python3 -m "
                  f"{PACKAGE}.cpp_consumer --build` is run", file=sys.stderr)


class Sdist(sdist):
    """The sdist with the consumer's sources inside the package directory."""

    def make_release_tree(self, base_dir: str, files) -> None:
        super().make_release_tree(base_dir, files)
        target = Path(base_dir) / CPP_SRC
        if target.exists() and not target.is_symlink():
            shutil.rmtree(target)  # a hard-linked copy of an unpacked sdist's own
        if not copy_sources(target):
            raise SystemExit(f"{PACKAGE}: the C++ consumer's sources are missing; an sdist "
                             "needs the checkout around client-python")


class PackageDistribution(Distribution):
    """A platform-specific wheel when it carries the compiled extension."""

    def has_ext_modules(self) -> bool:
        return will_build_extension()


setup(cmdclass={"build_py": BuildPy, "sdist": Sdist}, distclass=PackageDistribution)
