"""The control block and the doorbell are laid out twice by hand: in C++ for ddod and the C++
client (proto/wire/include/ddo/wire/control_layout.h) and in Python for the runner
(diffusers_dynamic_offloader/control_block.py). This test reads the C++ header and holds the
Python constants to it, field by field, so that neither side can move or add a field alone
(issue 17, item 5)."""

from __future__ import annotations

import os
import re

from diffusers_dynamic_offloader import control_block
from support import SOURCE_ROOT

HEADER = os.path.join(os.path.dirname(os.path.dirname(SOURCE_ROOT)), "proto", "wire", "include",
                      "ddo", "wire", "control_layout.h")

#: C++ name in control_layout -> the Python module's name for the same field.
CONTROL = {
    "kMagic": "CONTROL_MAGIC", "kVersion": "CONTROL_VERSION",
    "kMagicOffset": "_MAGIC", "kVersionOffset": "_VERSION", "kSlotsOffset": "_SLOTS",
    "kUnitsOffset": "_UNITS", "kDaemonPidOffset": "_DAEMON_PID",
    "kScheduleLengthOffset": "_SCHEDULE_LENGTH", "kArenaBytesOffset": "_ARENA_BYTES",
    "kReadyOffset": "_READY", "kConsumedOffset": "_CONSUMED", "kStateOffset": "_STATE",
    "kRunnerWaitingOffset": "_RUNNER_WAITING", "kSyncRequestOffset": "_SYNC_REQUEST",
    "kSyncUnitOffset": "_SYNC_UNIT", "kSyncDoneOffset": "_SYNC_DONE",
    "kSkippedUsesOffset": "_STAT_SKIPPED", "kSyncUsesOffset": "_STAT_SYNC",
    "kConsumedUsesOffset": "_STAT_STREAMED", "kSlotUseOffset": "_SLOT_USE",
}
#: Values of the C++ layout that the runner never reads.
CONTROL_DAEMON_ONLY = {"kNoUse"}
DOORBELL = {"kMagic": "DOORBELL_MAGIC", "kSeqOffset": "_BELL_SEQ",
            "kDaemonSleepingOffset": "_BELL_SLEEPING", "kBytes": "DOORBELL_BYTES"}
STATES = {"kOpen": "STATE_OPEN", "kClosed": "STATE_CLOSED", "kFailed": "STATE_FAILED"}


def _namespace(text: str, name: str) -> dict:
    body = re.search(rf"namespace {name} {{(.*?)}}  // namespace {name}", text, re.S)
    assert body, f"no namespace {name} in {HEADER}"
    values = {}
    for constant, value in re.findall(
            r"inline constexpr \w+ (k\w+) = (0x[0-9A-Fa-f]+|~0ull|\d+)", body.group(1)):
        values[constant] = int(value, 0) if value != "~0ull" else (1 << 64) - 1
    return values


def _header() -> str:
    with open(HEADER) as file:
        return file.read()


def _assert_same(cpp: dict, names: dict, daemon_only=frozenset()) -> None:
    assert set(cpp) - set(daemon_only) == set(names), (
        f"fields on one side only: C++ {sorted(set(cpp) - set(names) - set(daemon_only))}, "
        f"Python {sorted(set(names) - set(cpp))}")
    for constant, python_name in names.items():
        assert getattr(control_block, python_name) == cpp[constant], (
            f"{constant} = {cpp[constant]} in C++, {python_name} = "
            f"{getattr(control_block, python_name)} in Python")


def test_the_control_block_layout_is_the_same_on_both_sides():
    _assert_same(_namespace(_header(), "control_layout"), CONTROL, CONTROL_DAEMON_ONLY)


def test_the_doorbell_layout_is_the_same_on_both_sides():
    _assert_same(_namespace(_header(), "doorbell_layout"), DOORBELL)


def test_the_session_states_are_the_same_on_both_sides():
    states = re.search(r"enum class SessionState : uint32_t \{([^}]*)\}", _header())
    assert states
    cpp = {name: int(value) for name, value in re.findall(r"(k\w+) = (\d+)", states.group(1))}
    _assert_same(cpp, STATES)
