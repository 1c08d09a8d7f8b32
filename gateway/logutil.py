"""Rate-limited logging per source, so that nobody outside can fill the gateway's disk.

A peer that sends junk (a port scanner, a misconfigured agent, a bad report every second)
must cost at most a line per minute. `RateLimitedLogger` keys messages by (source, kind):
the first one in a window is logged, repeats inside the window are counted, and when the
window ends one line says how many were suppressed. The number of keys is bounded too: once
`max_keys` sources are being tracked, new sources share one overflow key, so a flood from
many addresses is as quiet as a flood from one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["RateLimitedLogger", "RepeatFilter"]

OVERFLOW = "(other sources)"


@dataclass
class _Window:
    start: float
    level: int
    suppressed: int = 0


class RateLimitedLogger:
    """Logs the first message per (source, kind) per window and a count of the rest.

    Thread-safe. `flush()` reports the suppressed counts of windows that have ended; call
    it now and then (the receiver does on every poll tick); a new message for a key whose
    window ended flushes that key first."""

    def __init__(
        self,
        logger: logging.Logger,
        window_s: float = 60.0,
        *,
        max_keys: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self.window_s = window_s
        self.max_keys = max_keys
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], _Window] = {}
        self.suppressed_total = 0

    def log(
        self,
        level: int,
        source: str,
        kind: str,
        msg: str,
        *args: object,
        exc_info: bool = False,
    ) -> bool:
        """Log `msg % args` unless (source, kind) was logged less than a window ago;
        True when it was logged."""
        now = self._clock()
        with self._lock:
            key = (source, kind)
            if key not in self._windows and len(self._windows) >= self.max_keys:
                self._expire(now)
                if len(self._windows) >= self.max_keys:
                    key = (OVERFLOW, kind)
            win = self._windows.get(key)
            if win is not None and now - win.start < self.window_s:
                win.suppressed += 1
                self.suppressed_total += 1
                return False
            if win is not None:
                self._report(key, win)
            self._windows[key] = _Window(now, level)
        self.logger.log(level, msg, *args, exc_info=exc_info)
        return True

    def flush(self) -> int:
        """Report the suppressed counts of ended windows and forget them; returns how many
        lines were written."""
        with self._lock:
            return self._expire(self._clock())

    def _expire(self, now: float) -> int:
        ended = [k for k, w in self._windows.items() if now - w.start >= self.window_s]
        lines = 0
        for key in ended:
            lines += self._report(key, self._windows.pop(key))
        return lines

    def _report(self, key: tuple[str, str], win: _Window) -> int:
        if not win.suppressed:
            return 0
        source, kind = key
        self.logger.log(
            win.level,
            "%d similar messages suppressed (%s from %s) in the last %.0f s",
            win.suppressed,
            kind,
            source,
            self.window_s,
        )
        return 1


class RepeatFilter(logging.Filter):
    """A logging filter for messages a peer can cause and that name no source (uvicorn's
    "Invalid HTTP request received." for every malformed request on the socket): the first
    record per (logger, message template) per window passes, repeats are dropped and
    counted, and the next record after the window says how many were."""

    def __init__(
        self, window_s: float = 60.0, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        super().__init__()
        self.window_s = window_s
        self._clock = clock
        self._lock = threading.Lock()
        self._windows: dict[tuple[str, str], _Window] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, str(record.msg))
        now = self._clock()
        with self._lock:
            win = self._windows.get(key)
            if win is not None and now - win.start < self.window_s:
                win.suppressed += 1
                return False
            if len(self._windows) >= 1024:  # templates are few; bound them all the same
                self._windows.clear()
            self._windows[key] = _Window(now, record.levelno)
        if win is not None and win.suppressed:
            record.msg = f"{record.msg} ({win.suppressed} similar messages suppressed)"
        return True
