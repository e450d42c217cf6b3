"""The repository cites only what it holds (issue 32, item 4).

The team's inventory of the seed (``research/seed-ddo.md``) is kept beside the repository, not in
it: a comment that cites it sends a reader to a file they cannot open. docs/seed.md holds what the
code relies on ("the seed's rules the code follows"); code, tests and tools cite that page, or the
docs page of the rule (configuration.md for a DDO_* variable). Only docs/ may still name the
inventory, as history.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
INVENTORY = "research/seed-ddo.md"


def test_nothing_outside_docs_cites_the_seed_inventory() -> None:
    found = subprocess.run(
        ["git", "grep", "-n", "-F", INVENTORY, "--", ".", ":(exclude)docs",
         ":(exclude)tests/python/test_doc_citations.py"],
        cwd=ROOT, capture_output=True, text=True,
    )
    assert found.returncode in (0, 1), found.stderr  # 1: no match
    assert not found.stdout, (
        f"these lines cite {INVENTORY}, which is not in the repository; point them at "
        "docs/seed.md (or the docs page of the rule):\n" + found.stdout
    )


def test_the_seed_page_holds_the_sections_the_code_cites() -> None:
    page = (ROOT / "docs" / "seed.md").read_text(encoding="utf-8")
    for heading in ("### The module paths, the data classes and the event payload",
                    "### The route for `auto`", "### The balanced planner", "### Profiles",
                    "### Phases, staged runs and loading one component",
                    "## Where parity is tested"):
        assert heading in page, heading
