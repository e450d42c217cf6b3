#!/usr/bin/env bash
# Installs what DDO needs to build and test on Debian 12, from Debian's own packages.
# Idempotent: packages already present are not fetched again. Needs root (or sudo).
#
# The CUDA toolkit is not a Debian package: when /usr/local/cuda exists the build uses it,
# otherwise ddod is built with the host backend only.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config clang libclang-rt-14-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev libspdlog-dev nlohmann-json3-dev libxxhash-dev libre2-dev libssl-dev libgtest-dev
  libgmock-dev libsystemd-dev systemd help2man python3-prometheus-client
  python3 python3-grpcio python3-protobuf python3-torch python3-pytest python3-tqdm python3-xxhash
  python3-pip python3-setuptools python3-wheel
  # The C++ client's torch half (client-cpp; python3-torch does not pull the headers).
  libtorch-dev
  # The Python client's C++ consumer extension (torch.utils.cpp_extension builds it on first use).
  pybind11-dev python3-dev
  # The Debian packages (tools/package.sh: deploy/debian with debhelper) and their check.
  dpkg-dev debhelper dh-python lintian
  # The Windows cross-build of the platform layer and the ported daemon layers, and their tests
  # under wine (tools/cross-windows.sh); unicode-data for RE2's tables, made again from source.
  g++-mingw-w64-x86-64-posix wine64 googletest unicode-data
)
# The offline check of deploy/kubernetes (tools/validate-kubernetes.sh) needs node and npm. Not
# in the list above: a NodeSource nodejs already brings npm and conflicts with Debian's.
command -v npm > /dev/null || packages+=(nodejs npm)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [[ $(id -u) -ne 0 ]]; then
  sudo="sudo"
fi
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
