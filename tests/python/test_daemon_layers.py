"""The daemon's folders are layers (docs/architecture.md §2, "Layers"): a folder includes only
lower ones, and protobuf messages appear only at the gRPC edge. Below them all is proto/wire,
shared with the C++ client: it includes nothing of daemon/ and no protobuf. Read from the
sources, so that a change that breaks the shape fails here rather than in review."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DAEMON = ROOT / "daemon"
#: The protocol's shared half (proto/wire): below every daemon folder, so it includes none.
WIRE = ROOT / "proto" / "wire"
#: The one library of proto/wire that speaks gRPC (ddo_wire_connect: ConnectToDaemon makes the
#: health check and GetInfo): it may use gRPC and the ddo.v1 stubs, still nothing of daemon/.
WIRE_GRPC = {"connect_to_daemon.h", "connect_to_daemon.cc"}
#: The C++ consumer core, compiled into ddo::client and the Python extension: the standard
#: library, libc, torch, and these project headers only (no gRPC, absl, protobuf, spdlog).
CONSUMER = ROOT / "client-cpp" / "src" / "consumer"
CONSUMER_HEADERS = re.compile(r"(ddo/wire/(control_layout|futex)\.h|ddo/status\.h"
                              r"|client-cpp/src/consumer/[a-z_]+\.h)$")

ANY_INCLUDE = re.compile(r'^#include [<"]([^>"]+)[>"]', re.M)

#: Each folder's layer, read from the one place that declares it: daemon/CMakeLists.txt, where
#: each folder is a library `ddo_daemon_layer(<folder> LAYER <n> ...)` (daemon/layers.cmake makes
#: the build refuse an include against the order; this test says which file broke it in words).
#: main/ holds the executables, above every layer.
def _declared_layers():
    text = (DAEMON / "CMakeLists.txt").read_text()
    layers = {m.group(1): int(m.group(2))
              for m in re.finditer(r"^ddo_daemon_layer\((\w+) LAYER (\d+)", text, re.M)}
    layers["main"] = max(layers.values()) + 1
    return layers


LAYER = _declared_layers()

#: Where ddo::v1 messages may be read or written.
PROTO_EDGE = {"service", "ctl", "server", "main"}

INCLUDE = re.compile(r'^#include "(daemon/([a-z_]+)/[^"]+|ddo/v1/[^"]+|[^"]+\.pb\.h)"', re.M)


def _sources():
    for path in sorted(DAEMON.rglob("*")):
        if path.suffix in (".cc", ".h") and not path.name.endswith("_test.cc"):
            yield path, path.relative_to(DAEMON).parts[0]


def test_every_folder_has_a_layer():
    folders = {path.name for path in DAEMON.iterdir() if path.is_dir()}
    assert folders == set(LAYER), "a new folder needs its place in LAYER and in the docs"


def test_folders_include_only_lower_layers():
    wrong = []
    for path, folder in _sources():
        for match in INCLUDE.finditer(path.read_text()):
            included = match.group(2)
            if included and included != folder and LAYER[included] >= LAYER[folder]:
                wrong.append(f"{path.relative_to(DAEMON)} includes {match.group(1)}")
    assert not wrong, "\n".join(wrong)


def test_protobuf_stays_at_the_edge():
    wrong = []
    for path, folder in _sources():
        if folder in PROTO_EDGE:
            continue
        text = path.read_text()
        for match in INCLUDE.finditer(text):
            if match.group(2) is None:
                wrong.append(f"{path.relative_to(DAEMON)} includes {match.group(1)}")
        if "ddo::v1::" in text:
            wrong.append(f"{path.relative_to(DAEMON)} names ddo::v1")
    assert not wrong, "\n".join(wrong)


def _wire_sources():
    # Tests are exempt, as in daemon/: identity_client_test.cc runs against ddod's server.
    for path in sorted(WIRE.rglob("*")):
        if path.suffix in (".cc", ".h") and not path.name.endswith("_test.cc"):
            yield path


def test_wire_includes_nothing_of_the_daemon_and_no_protobuf():
    wrong = []
    for path in _wire_sources():
        text = path.read_text()
        for match in INCLUDE.finditer(text):
            if path.name in WIRE_GRPC and not match.group(1).startswith("daemon/"):
                continue
            wrong.append(f"{path.relative_to(ROOT)} includes {match.group(1)}")
        if path.name in WIRE_GRPC:
            continue
        if "ddo::v1::" in text or re.search(r'#include [<"](grpc|google/protobuf)', text):
            wrong.append(f"{path.relative_to(ROOT)} uses protobuf or gRPC")
    assert list(_wire_sources()), "proto/wire has moved: update WIRE"
    assert all((WIRE / sub / name).exists() for sub, name in
               (("include/ddo/wire", "connect_to_daemon.h"), ("src", "connect_to_daemon.cc"))), \
        "connect_to_daemon has moved: update WIRE_GRPC"
    # ... and it is built apart: ddo_wire itself links no gRPC.
    cmake = (WIRE / "CMakeLists.txt").read_text()
    wire_library = re.search(r"add_library\(ddo_wire STATIC([^)]*)\)", cmake).group(1)
    assert "connect_to_daemon" not in wire_library and "grpc" not in wire_library.lower()
    assert not wrong, "\n".join(wrong)


def test_daemon_includes_the_moved_files_from_wire():
    """The identity client, the address rules and the small POSIX helpers are included from
    ddo/wire/ itself: daemon/ keeps no forwarding header for them."""
    gone = re.compile(r'#include "daemon/(identity/(identity_client|identity_protocol|seqpacket)'
                      r'|ctl/daemon_address|common/(unique_fd|posix_error|display_text))\.h"')
    wrong = [str(path.relative_to(ROOT)) for path in DAEMON.rglob("*")
             if path.suffix in (".cc", ".h") and gone.search(path.read_text())]
    assert not wrong, wrong


def test_the_layer_order_is_the_documented_one():
    """Policy sits under the store and the engine; the shapes both use are in layout/."""
    assert LAYER["common"] == 0
    assert LAYER["layout"] < LAYER["policy"] < LAYER["store"] < LAYER["stream"] < LAYER["service"]
    assert LAYER["service"] < LAYER["server"] and LAYER["service"] < LAYER["ctl"]


def test_the_consumer_core_includes_only_torch_and_the_shared_headers():
    wrong = []
    for path in sorted(CONSUMER.rglob("*")):
        if path.suffix not in (".cc", ".h"):
            continue
        for match in re.finditer(r'^#include "([^"]+)"', path.read_text(), re.M):
            if not CONSUMER_HEADERS.match(match.group(1)):
                wrong.append(f"{path.relative_to(ROOT)} includes {match.group(1)}")
        for match in re.finditer(r"^#include <([^>]+)>", path.read_text(), re.M):
            if match.group(1).split("/")[0] in ("absl", "grpcpp", "grpc", "google", "spdlog"):
                wrong.append(f"{path.relative_to(ROOT)} includes {match.group(1)}")
    assert not wrong, "\n".join(wrong)
