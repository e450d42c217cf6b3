"""The control block and the doorbell have one layout, the C++ header's
(proto/wire/include/ddo/wire/control_layout.h). The Python client's constants are generated
from it (tools/gen_control_layout.py -> diffusers_dynamic_offloader/_control_layout.py,
committed); this test regenerates the module and holds the committed file to it, and holds
control_block's names to the generated values, so that neither side can move or add a field
alone (issue 17 item 5, issue 32 item 3)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

from diffusers_dynamic_offloader import _control_layout, control_block
from support import SOURCE_ROOT

REPO = os.path.dirname(os.path.dirname(SOURCE_ROOT))
GENERATOR = os.path.join(REPO, "tools", "gen_control_layout.py")
HEADER = os.path.join(REPO, "proto", "wire", "include", "ddo", "wire", "control_layout.h")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_control_layout", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_regenerating_gives_the_committed_module():
    with open(HEADER, encoding="utf-8") as header:
        expected = _generator().render(header.read())
    with open(_control_layout.__file__, encoding="utf-8") as committed:
        assert committed.read() == expected, "run tools/gen_control_layout.py"
    done = subprocess.run([sys.executable, GENERATOR, "--check"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr


def test_every_field_of_the_header_is_generated():
    names = {name for name in vars(_control_layout) if name.isupper()}
    assert {"CONTROL_MAGIC", "CONTROL_VERSION", "CONTROL_READY_OFFSET", "CONTROL_SLOT_USE_OFFSET",
            "CONTROL_CONSUMED_USES_OFFSET", "CONTROL_NO_USE", "DOORBELL_MAGIC",
            "DOORBELL_SEQ_OFFSET", "DOORBELL_DAEMON_SLEEPING_OFFSET", "DOORBELL_BYTES",
            "SESSION_STATE_OPEN", "SESSION_STATE_CLOSED", "SESSION_STATE_FAILED"} <= names
    with open(HEADER, encoding="utf-8") as header:
        text = header.read()
    # As many constants as the header's two layout namespaces and SessionState hold.
    assert len(names) == len(re.findall(r"inline constexpr uint\w+ k\w+ =", text)) + 3


def test_a_changed_header_changes_the_module():
    with open(HEADER, encoding="utf-8") as header:
        text = header.read()
    moved = text.replace("kReadyOffset = 64;", "kReadyOffset = 72;")
    assert moved != text
    assert "CONTROL_READY_OFFSET = 72" in _generator().render(moved)


def test_the_control_block_reads_the_generated_layout():
    layout = _control_layout
    assert (control_block.CONTROL_MAGIC, control_block.CONTROL_VERSION) == (
        layout.CONTROL_MAGIC, layout.CONTROL_VERSION)
    assert (control_block.DOORBELL_MAGIC, control_block.DOORBELL_BYTES) == (
        layout.DOORBELL_MAGIC, layout.DOORBELL_BYTES)
    assert (control_block.STATE_OPEN, control_block.STATE_CLOSED, control_block.STATE_FAILED) == (
        layout.SESSION_STATE_OPEN, layout.SESSION_STATE_CLOSED, layout.SESSION_STATE_FAILED)
    pairs = {
        "_MAGIC": "CONTROL_MAGIC_OFFSET", "_VERSION": "CONTROL_VERSION_OFFSET",
        "_SLOTS": "CONTROL_SLOTS_OFFSET", "_UNITS": "CONTROL_UNITS_OFFSET",
        "_DAEMON_PID": "CONTROL_DAEMON_PID_OFFSET",
        "_SCHEDULE_LENGTH": "CONTROL_SCHEDULE_LENGTH_OFFSET",
        "_ARENA_BYTES": "CONTROL_ARENA_BYTES_OFFSET", "_READY": "CONTROL_READY_OFFSET",
        "_CONSUMED": "CONTROL_CONSUMED_OFFSET", "_STATE": "CONTROL_STATE_OFFSET",
        "_RUNNER_WAITING": "CONTROL_RUNNER_WAITING_OFFSET",
        "_SYNC_REQUEST": "CONTROL_SYNC_REQUEST_OFFSET", "_SYNC_UNIT": "CONTROL_SYNC_UNIT_OFFSET",
        "_SYNC_DONE": "CONTROL_SYNC_DONE_OFFSET", "_STAT_SKIPPED": "CONTROL_SKIPPED_USES_OFFSET",
        "_STAT_SYNC": "CONTROL_SYNC_USES_OFFSET", "_STAT_STREAMED": "CONTROL_CONSUMED_USES_OFFSET",
        "_SLOT_USE": "CONTROL_SLOT_USE_OFFSET", "_BELL_SEQ": "DOORBELL_SEQ_OFFSET",
        "_BELL_SLEEPING": "DOORBELL_DAEMON_SLEEPING_OFFSET",
    }
    for mine, generated in pairs.items():
        assert getattr(control_block, mine) == getattr(layout, generated), mine
