"""Every C++ header says who may call it from where (issue 32, item 4).

A header's top comment carries a line starting ``// Thread-safety:`` (daemon/device/*.h shows
the style): immutable after construction, one thread, internally locked by which mutex,
callers serialize, or a value type. A reader learns the rule where the declarations are, and a
new header without one fails here. Scanned: every tracked .h under daemon/, client-cpp/ and
proto/wire/, up to the include guard (the top comment).
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("daemon", "client-cpp", "proto/wire")


def _headers() -> List[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--", *(f"{folder}/*.h" for folder in FOLDERS)],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout.split()
    return [ROOT / name for name in listed]


def _top_comment(path: Path) -> List[str]:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            break
        lines.append(line)
    return lines


def test_headers_are_found() -> None:
    # A broken listing (no git, a moved folder) must not pass as "nothing lacks a contract".
    assert len(_headers()) > 100


def test_every_header_states_its_thread_safety() -> None:
    lacking = [
        str(path.relative_to(ROOT))
        for path in _headers()
        if not any(line.startswith("// Thread-safety:") for line in _top_comment(path))
    ]
    assert not lacking, (
        "these headers have no '// Thread-safety:' line in their top comment (who may call "
        "them from where: see daemon/device/*.h): " + ", ".join(lacking)
    )
