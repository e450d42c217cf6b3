"""Figures of a GPU test module: printed as ``[<name>-gpu] key: value`` (pytest -s) and, when
DDO_GPU_REPORT_DIR is set, written there as ``<name>.json`` after each one (a test that fails
later keeps what it measured)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable, Dict


def reporter(name: str) -> Callable[[str, Any], None]:
    """The ``report(key, value)`` of the module whose figures are called ``name``."""
    figures: Dict[str, Any] = {}

    def report(key: str, value: Any) -> None:
        figures[key] = value
        print(f"[{name}-gpu] {key}: {value}", flush=True)
        folder = os.environ.get("DDO_GPU_REPORT_DIR")
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
            (Path(folder) / f"{name}.json").write_text(
                json.dumps(figures, indent=1, default=str))

    return report
