#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs every test: the C++
# unit tests (CTest; the host-only build is built and its ddod run), the Windows cross-build of
# the platform layer and the ported daemon layers with their tests under wine64, bounded
# fuzzing, the Debian packages, the black-box Python suite and the security suite against the
# real ddod. Exits non-zero on any failure. Also checks that the
# committed Python stubs match proto/ and validates the Kubernetes manifests offline.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${DDO_BUILD_DIR:-$root/build}
cd "$root"

# A stage's banner, with the time: the whole run is to stay within 45 minutes on a 2-core
# machine (CI's), so each stage says when it began.
stage() { echo "== $* ($(date -u +%H:%M:%S) UTC, ${SECONDS} s in)"; }

stage "installing what is missing"
tools/install-deps.sh
stage "build"
tools/build.sh "$@"

stage "protocol stubs"
tools/gen_python_stubs.sh --check
python3 tools/gen_control_layout.py --check

stage "Kubernetes manifests (offline, against the OpenAPI schemas)"
tools/validate-kubernetes.sh "$build/kubernetes-validate"

stage "C++ unit tests"
ctest --test-dir "$build" --output-on-failure -j "${DDO_JOBS:-$(nproc)}"

stage "host-only build (-DDDO_WITH_CUDA=OFF): it builds, and its ddod serves"
# The CUDA-less configuration must keep building and serving too. Its unit tests are not built
# again: CI has no GPU, so the main build's tests above already ran every host-backend path
# (its CUDA backend finds no driver); what differs here is code compiled out, which this
# build compiles and its ddod runs. (Building and running them again took 11 of CI's 45
# minutes.) The C++ client has no CUDA build dependency (it reaches the driver through
# dlopen): the first build covered it.
if [[ -d /usr/local/cuda && "${DDO_SKIP_NOCUDA:-0}" != "1" ]]; then
  DDO_BUILD_DIR="$build-nocuda" tools/build.sh -DDDO_WITH_CUDA=OFF -DDDO_CLIENT_CPP=OFF \
    -DDDO_BUILD_TESTS=OFF
  tools/smoke-ddod.sh "$build-nocuda"
elif [[ ! -d /usr/local/cuda ]]; then
  echo "(no CUDA toolkit: the build above already was host-only)"
else
  echo "(skipped: DDO_SKIP_NOCUDA=1)"
fi

stage "Windows: the platform layer and the ported daemon layers cross-built (mingw-w64), their tests under wine64"
if [[ "${DDO_SKIP_WINDOWS:-0}" != "1" ]]; then
  DDO_WINDOWS_BUILD_DIR="$build-windows" tools/cross-windows.sh
else
  echo "(skipped: DDO_SKIP_WINDOWS=1)"
fi

stage "fuzzing (bounded)"
tools/run-fuzz.sh "${DDO_FUZZ_SECONDS:-20}"

stage "Debian packages"
# tests/python/test_install.py inspects them and runs lintian; tests/security/test_deb_install.py
# installs them. DDO_DEB_DIR holds exactly the packages of this build.
export DDO_DEB_DIR="$build/debs"
DDO_BUILD_DIR="$build" tools/package.sh "$DDO_DEB_DIR"

stage "Python tests (Debian python3, real ddod)"
# Debian's python3 with apt's grpcio/protobuf/torch/pytest: not a pyenv or venv python.
export PYTHONPATH="$root/client-python/src${PYTHONPATH:+:$PYTHONPATH}"
export DDO_DDOD_BINARY="$build/bin/ddod"
export DDO_DDOCTL_BINARY="$build/bin/ddoctl"
# The client's C++ consumer, built once here: the streaming tests run on it and on the Python
# one, and must not skip it on a machine that has what it needs (install-deps.sh installs it).
/usr/bin/python3 -m diffusers_dynamic_offloader.cpp_consumer --build
export DDO_REQUIRE_CPP_CONSUMER=1
/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/python

stage "security suite (throwaway users)"
# Its runners are other users, each with an empty extension cache: they stream with the Python
# consumer rather than build the C++ one in every test.
export DDO_CLIENT_CONSUMER=python
# Needs root: it creates users and groups and attacks a root ddod as them (skipped otherwise).
export PYTHONPATH="$root/client-python/src${PYTHONPATH:+:$PYTHONPATH}"
export DDO_DDOD_BINARY="$build/bin/ddod"
export DDO_DDOCTL_BINARY="$build/bin/ddoctl"
/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/security
