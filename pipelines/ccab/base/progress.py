"""Progress for operations that take more than a few seconds: a bar on a terminal, plain
timestamped lines (at every 10 % or every 10 s) when stderr is a file or a pipe, so a log never
holds a garbled bar. No line in the first ``quiet_s`` seconds (2 s): loading a 2 KB file prints
nothing but its result."""

from __future__ import annotations

import sys
import time


class Progress:
    """``with Progress("load", total=n, unit="bytes") as p: p.advance(k)``; ``total=None`` for an
    open-ended count (lines every ``every_s`` seconds)."""

    def __init__(self, desc: str, total: float | None = None, unit: str = "", enabled: bool = True,
                 stream=None, every_s: float = 10.0, quiet_s: float = 2.0):
        self.desc, self.total, self.unit, self.every_s, self.quiet_s = desc, total, unit, every_s, quiet_s
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.done = 0.0
        self._bar = None
        self._next_pct = 10
        self._last = time.monotonic()
        self._t0 = self._last

    def __enter__(self) -> "Progress":
        if self.enabled and self.stream.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, Progress as Bar, TextColumn, TimeElapsedColumn

            cols = [TextColumn("[bold]{task.description}"), BarColumn(),
                    TextColumn("{task.completed:,.0f}" + ("/{task.total:,.0f}" if self.total else "") + f" {self.unit}"),
                    TimeElapsedColumn()]
            self._bar = Bar(*cols, console=Console(file=self.stream), transient=False)
            self._task = self._bar.add_task(self.desc, total=self.total)
            self._bar.start()
        return self

    def advance(self, n: float = 1, note: str = "") -> None:
        self.done += n
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(self._task, completed=self.done)
            return
        now = time.monotonic()
        if now - self._t0 < self.quiet_s:
            return  # quick operations print no progress (the thresholds passed meanwhile are skipped)
        if self.total:
            pct = 100 * self.done / self.total
            if pct < self._next_pct and now - self._last < self.every_s:
                return
            while self._next_pct <= pct:
                self._next_pct += 10
            self._line(f"{self.done:,.0f}/{self.total:,.0f} {self.unit} ({pct:.0f} %)", note)
        elif now - self._last >= self.every_s:
            self._line(f"{self.done:,.0f} {self.unit}", note)

    def _line(self, what: str, note: str) -> None:
        self._last = time.monotonic()
        print(f"{time.strftime('%H:%M:%S')} {self.desc}: {what}, {self._last - self._t0:.0f} s"
              + (f" {note}" if note else ""), file=self.stream, flush=True)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()
