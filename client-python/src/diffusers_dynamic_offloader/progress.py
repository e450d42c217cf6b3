"""Progress of long transfers: a tqdm bar while it runs, and one summary line at the end.

``progress`` arguments of the client take three values:

- ``None`` (auto): a bar and the summary when the transfer is at least
  :data:`AUTO_MIN_BYTES` (1 GiB; ``DDO_PROGRESS_MIN_BYTES`` overrides it), else silence.
- ``True``: a bar (when ``tqdm`` is installed) and the summary, whatever the size.
- ``False``: silence.

The summary reads ``ddo: registered 'KEY': 4.00 GiB in 1.23 s (3.49 GB/s)`` (GB/s are 10^9
bytes per second). It goes to stderr, or to the ``log`` callable when one is given; a ``log``
callable receives it for transfers of any size unless ``progress`` is ``False``.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any, Callable, Optional

from .errors import ConfigurationError
from ._closeable import Closeable

#: Transfers at least this large get a bar and a summary by default.
AUTO_MIN_BYTES = 1 << 30
MIN_BYTES_ENV_VAR = "DDO_PROGRESS_MIN_BYTES"

LogFunction = Callable[[str], None]


def format_bytes(count: float) -> str:
    """``"4.00 GiB"``, ``"3.00 MiB"``, ``"512 B"`` (binary units)."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:.2f} {unit}"
    return f"{int(count)} B"


def format_rate(count: float, seconds: float) -> str:
    """``"3.49 GB/s"`` (10^9 bytes per second); ``"-- GB/s"`` when no time passed."""
    if seconds <= 0:
        return "-- GB/s"
    return f"{count / seconds / 1e9:.2f} GB/s"


def auto_min_bytes() -> int:
    """The size from which ``progress=None`` shows progress (``DDO_PROGRESS_MIN_BYTES``)."""
    text = os.environ.get(MIN_BYTES_ENV_VAR)
    if not text:
        return AUTO_MIN_BYTES
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ConfigurationError(f"{MIN_BYTES_ENV_VAR}={text!r} is not a byte count")
    return value


class ProgressReporter(Closeable):
    """Reports one transfer. Call :meth:`start` once the total is known, :meth:`update` as
    bytes move, and :meth:`finish` (or leave the ``with`` block) at the end.

    Args:
        description: The bar's label (the cache key).
        progress: ``True``, ``False`` or ``None`` (auto), as described in the module.
        log: Where the summary line goes; default stderr.
        min_bytes: The auto threshold; default :func:`auto_min_bytes`.
    """

    def __init__(
        self,
        description: str,
        *,
        progress: Optional[bool] = None,
        log: Optional[LogFunction] = None,
        min_bytes: Optional[int] = None,
    ) -> None:
        if progress not in (None, True, False):
            raise ConfigurationError(f"progress={progress!r} must be True, False or None (auto)")
        self.description = description
        self._progress = progress
        self._log = log
        self._min_bytes = auto_min_bytes() if min_bytes is None else min_bytes
        self._bar: Any = None
        self._total = 0
        self._bar_total = 0
        self._done = 0
        self._stage_base = 0
        self._started = time.monotonic()
        self._enabled = False

    @property
    def enabled(self) -> bool:
        """Whether this transfer shows progress (known after :meth:`start`)."""
        return self._enabled

    @property
    def bar(self) -> Any:
        """The tqdm bar, or None."""
        return self._bar

    def start(self, total: int, *, bar: bool = True) -> None:
        """Sets the total and, when enabled (and ``bar``), opens the bar; restarts the clock.

        ``bar=False`` decides only whether the summary is shown (for transfers that turned
        out to have nothing to move)."""
        self._total = int(total)
        self._bar_total = self._total
        self._done = 0
        self._stage_base = 0
        self._started = time.monotonic()
        if self._progress is None:
            self._enabled = self._total >= self._min_bytes
        else:
            self._enabled = self._progress
        if self._enabled and bar and self._bar is None:
            self._bar = _make_bar(self._total, self.description)

    def stage(self, name: str, total: int) -> None:
        """Begins one stage of a transfer made of several (a registration reserves ddod's
        memory, writes the bytes, then ddod verifies and pins them): the stage's ``total``
        bytes join the bar, whose label names the stage, and :meth:`update_to` counts from
        the stage's start. The summary still reports what :meth:`finish` is given."""
        self._stage_base = self._done
        self._bar_total += int(total)
        if self._bar is None and self._enabled and self._progress is not False:
            # A transfer started without a bar (it might have had nothing to move) gets one
            # with its first stage.
            self._bar = _make_bar(self._bar_total, self.description)
            if self._bar is not None and self._done:
                self._bar.update(self._done)
        if self._bar is not None:
            self._bar.total = self._bar_total
            self._bar.set_description(f"ddo {self.description} ({name})", refresh=True)

    def update(self, count: int) -> None:
        """``count`` more bytes are done."""
        self._done += count
        if self._bar is not None:
            self._bar.update(count)

    def update_to(self, done: int) -> None:
        """``done`` bytes in all (of this stage, after :meth:`stage`) are done, for sources
        that report totals."""
        done += self._stage_base
        if done > self._done:
            self.update(done - self._done)

    def elapsed(self) -> float:
        """Seconds since :meth:`start`."""
        return time.monotonic() - self._started

    def finish(
        self, verb: str, *, count: Optional[int] = None, seconds: Optional[float] = None
    ) -> None:
        """Closes the bar and reports ``ddo: VERB 'KEY': SIZE in T s (R GB/s)``.

        Args:
            verb: ``"registered"``, ``"loaded"``.
            count: Bytes to report; default the total.
            seconds: Duration to report; default the time since :meth:`start`.
        """
        self.close()
        count = self._total if count is None else count
        seconds = self.elapsed() if seconds is None else seconds
        self.message(
            f"ddo: {verb} {self.description!r}: {format_bytes(count)} in {seconds:.2f} s "
            f"({format_rate(count, seconds)})"
        )

    def message(self, line: str) -> None:
        """Emits ``line`` under the same rules as the summary."""
        if self._progress is False:
            return
        if self._log is not None:
            self._log(line)
        elif self._enabled:
            print(line, file=sys.stderr, flush=True)

    def close(self) -> None:
        """Closes the bar, if any. Idempotent."""
        bar, self._bar = self._bar, None
        if bar is not None:
            bar.close()


def _make_bar(total: int, description: str) -> Any:
    """A tqdm bar in bytes, or None when tqdm is not installed."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(
        total=total,
        desc=f"ddo {description}",
        unit="B",
        unit_scale=True,  # decimal prefixes: the bar's GB/s is the summary's GB/s
        file=sys.stderr,
        leave=False,
        dynamic_ncols=True,
    )
