"""Progress on long command-line work: a one-line bar on stderr, only on a terminal.

Scripts read the commands' output, and real Slurm's commands print nothing extra into a pipe,
so nothing is drawn unless the stream is a terminal. `bar_line` is the one look (the same as
`caldera simulate`'s); `Ticker` redraws it from a thread while the caller blocks on one long
call (a request to the gateway, a daemon starting), and clears it when the call returns.
"""

from __future__ import annotations

import itertools
import sys
import threading
import time
from types import TracebackType
from typing import TextIO

__all__ = ["Ticker", "bar_line"]

_WIDTH = 40
_SPIN = "|/-\\"


def bar_line(label: str, done: float, total: float, width: int = _WIDTH) -> str:
    """`label [#####.....] done/total` (no newline); `done` past `total` shows full."""
    filled = width if total <= 0 else max(0, min(width, int(width * done // total)))
    return f"{label} [{'#' * filled}{'.' * (width - filled)}]"


class Ticker:
    """`with Ticker("scancel: cancelling 5000 jobs"):` - while the block runs, a line on
    `stream` (stderr) shows the time spent (against `total_s` when there is a deadline),
    redrawn every `interval_s` after `delay_s`; quiet when the stream is not a terminal."""

    def __init__(
        self,
        label: str,
        total_s: float | None = None,
        stream: TextIO | None = None,
        delay_s: float = 0.3,
        interval_s: float = 0.1,
    ) -> None:
        self.label = label
        self.total_s = total_s
        self.stream = sys.stderr if stream is None else stream
        self.delay_s = delay_s
        self.interval_s = interval_s
        self.drawn = 0  # lines drawn (tests read it)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._width = 0

    def _line(self, elapsed: float, spin: str) -> str:
        if self.total_s is not None:
            head = bar_line(self.label, elapsed, self.total_s)
            return f"{head} {elapsed:.1f}/{self.total_s:g}s"
        return f"{self.label} {spin} {elapsed:.1f}s"

    def _run(self, started: float) -> None:
        if self._stop.wait(self.delay_s):
            return
        for spin in itertools.cycle(_SPIN):
            line = self._line(time.monotonic() - started, spin)
            self._width = max(self._width, len(line))
            try:
                self.stream.write("\r" + line.ljust(self._width))
                self.stream.flush()
            except (OSError, ValueError):  # the terminal went away: the work goes on
                return
            self.drawn += 1
            if self._stop.wait(self.interval_s):
                return

    def __enter__(self) -> Ticker:
        try:
            tty = self.stream.isatty()
        except (OSError, ValueError):
            tty = False
        if tty:
            started = time.monotonic()
            self._thread = threading.Thread(
                target=self._run, args=(started,), name="caldera-progress", daemon=True
            )
            self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        if self.drawn:
            try:
                self.stream.write("\r" + " " * self._width + "\r")  # the line goes away
                self.stream.flush()
            except (OSError, ValueError):
                pass
