#!/usr/bin/env bash
# Measures whether gRPC and everything it needs cross-build for Windows with mingw-w64 from
# Debian's source packages within CI's time (issue 35, item 5): builds c-ares, re2, abseil,
# protobuf (the library; protoc is the host's), OpenSSL and gRPC's C++ library in that order,
# each from the source package of the installed -dev package, installed into WORK/prefix, and
# prints the seconds of each step and the total. zlib is Debian's own Windows build
# (libz-mingw-w64-dev: its source package drops the Windows files). Not run by CI: this is the
# measurement that decides whether CI can build the whole ddod for Windows.
#
#   tools/windows/cross-build-grpc.sh WORK      (DDO_JOBS: parallel jobs, default nproc)
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mkdir -p "$1" && cd "$1" && pwd)
jobs=${DDO_JOBS:-$(nproc)}
prefix="$work/prefix"
export DDO_CROSS_PREFIX="$prefix"
toolchain="$root/tools/windows/mingw-w64.cmake"
mkdir -p "$prefix"
started=$(date +%s)
results=()

step() {  # name, then the commands (a function) that build it; a step done before is kept
  local name=$1 began
  shift
  if [[ -f "$work/$name.seconds" ]]; then
    results+=("$name: $(cat "$work/$name.seconds") s (an earlier run)")
    return
  fi
  began=$(date +%s)
  echo "== $name"
  if "$@" > "$work/$name.log" 2>&1; then
    echo "$(( $(date +%s) - began ))" > "$work/$name.seconds"
    results+=("$name: $(( $(date +%s) - began )) s")
    echo "   $name: $(( $(date +%s) - began )) s"
  else
    results+=("$name: FAILED after $(( $(date +%s) - began )) s (log: $work/$name.log)")
    echo "   $name failed after $(( $(date +%s) - began )) s:"; tail -n 20 "$work/$name.log"
    report
    exit 1
  fi
}

report() {
  echo "== cross-build of gRPC's chain with mingw-w64, $jobs jobs, $(nproc) CPUs"
  printf '   %s\n' "${results[@]}"
  echo "   total: $(( $(date +%s) - started )) s"
}

cmake_project() {  # source dir, build dir, extra cmake arguments...
  local source=$1 build=$2
  shift 2
  cmake -S "$source" -B "$build" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$toolchain" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_PREFIX_PATH="$prefix" \
    -DBUILD_SHARED_LIBS=OFF -DCMAKE_CXX_STANDARD=17 "$@"
  cmake --build "$build" -j "$jobs"
  cmake --install "$build"
}

source_of() { "$root/tools/windows/debian-source.sh" "$1" "$work/src"; }

build_cares() {
  # 1.18.1's inet_net_pton.c names INADDRSZ where it means NS_INADDRSZ (fixed in 1.19): glibc's
  # headers happen to define it, mingw's do not.
  cmake_project "$(source_of libc-ares-dev)" "$work/b/cares" -DCARES_STATIC=ON -DCARES_SHARED=OFF \
    -DCARES_BUILD_TOOLS=OFF -DCARES_BUILD_TESTS=OFF -DCMAKE_C_FLAGS=-DINADDRSZ=4
}
build_re2() {
  local source
  source=$(source_of libre2-dev)
  # Debian's source drops the generated tables; its build makes them again (REBUILD_TABLES),
  # from the unicode-data package's files.
  (cd "$source" && perl re2/make_perl_groups.pl > re2/perl_groups.cc &&
   /usr/bin/python3 re2/make_unicode_casefold.py > re2/unicode_casefold.cc &&
   /usr/bin/python3 re2/make_unicode_groups.py > re2/unicode_groups.cc)
  cmake_project "$source" "$work/b/re2" -DRE2_BUILD_TESTING=OFF
}
build_abseil() {
  cmake_project "$(source_of libabsl-dev)" "$work/b/abseil" -DABSL_PROPAGATE_CXX_STD=ON \
    -DBUILD_TESTING=OFF
}
build_protobuf() {
  cmake_project "$(source_of libprotobuf-dev)" "$work/b/protobuf" -Dprotobuf_BUILD_TESTS=OFF \
    -Dprotobuf_BUILD_PROTOC_BINARIES=OFF -Dprotobuf_WITH_ZLIB=OFF
}
build_openssl() {
  local source
  source=$(source_of libssl-dev)
  (cd "$source" && ./Configure mingw64 no-shared no-tests \
     --cross-compile-prefix=x86_64-w64-mingw32- --prefix="$prefix" --libdir=lib &&
   make -j "$jobs" build_libs && make install_dev)
}
build_grpc() {
  # gRPC's C++ library only (what ddod links): no code generators and nothing installed. Its
  # configure step asks for libprotoc for grpc_plugin_support, a target not built here.
  local build="$work/b/grpc"
  cmake -S "$(source_of libgrpc++-dev)" -B "$build" -G Ninja -DCMAKE_TOOLCHAIN_FILE="$toolchain" \
    -DCMAKE_BUILD_TYPE=Release -DCMAKE_PREFIX_PATH="$prefix" -DBUILD_SHARED_LIBS=OFF \
    -DCMAKE_CXX_STANDARD=17 -DgRPC_BUILD_TESTS=OFF \
    -DgRPC_ABSL_PROVIDER=package -DgRPC_CARES_PROVIDER=package -DgRPC_PROTOBUF_PROVIDER=package \
    -DgRPC_RE2_PROVIDER=package -DgRPC_SSL_PROVIDER=package -DgRPC_ZLIB_PROVIDER=package \
    -DgRPC_BUILD_CODEGEN=OFF -DgRPC_BUILD_GRPC_CPP_PLUGIN=OFF -DgRPC_BUILD_CSHARP_EXT=OFF \
    -DProtobuf_PROTOC_EXECUTABLE=/usr/bin/protoc -DProtobuf_PROTOC_LIBRARY="$prefix/lib/libprotobuf.a" \
    -DOPENSSL_ROOT_DIR="$prefix"
  cmake --build "$build" -j "$jobs" --target grpc++
}

step c-ares build_cares
step re2 build_re2
step abseil build_abseil
step protobuf build_protobuf
step openssl build_openssl
step grpc build_grpc
report
