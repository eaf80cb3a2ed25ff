"""A small progress bar for long commands, written to stderr."""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """A bar over ``total`` units: :meth:`advance` as work completes, :meth:`close` at the end."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.total, self.label, self.done = max(int(total), 1), label, 0
        self.stream = stream or sys.stderr
        self.start = time.monotonic()
        self._last = 0.0
        self._draw(force=True)

    def advance(self, steps: int = 1, note: str = "") -> None:
        """Count ``steps`` more units of work."""
        self.done = min(self.total, self.done + steps)
        self._draw(note=note)

    def _draw(self, note: str = "", force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < 0.2 and self.done < self.total:
            return
        self._last = now
        frac = self.done / self.total
        filled = int(30 * frac)
        elapsed = now - self.start
        eta = elapsed / frac - elapsed if frac > 0 else float("nan")
        eta_text = f"eta {eta:5.0f}s" if frac > 0 else "eta    ?s"
        line = (f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] {self.done}/{self.total} "
                f"{elapsed:5.0f}s {eta_text} {note}")
        self.stream.write(line[:160].ljust(100))
        self.stream.flush()

    def close(self) -> None:
        """Finish the bar with a newline."""
        self._draw(force=True)
        self.stream.write("\n")
        self.stream.flush()
