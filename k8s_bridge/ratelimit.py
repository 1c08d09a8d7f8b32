"""A token bucket, as client-go's flowcontrol: `qps` tokens a second, at most `burst` saved.

Every request Caldera makes to one API server takes a token first, so a flood of submits,
binds or deletes reaches the server at a bounded rate no matter how many threads ask.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["TokenBucket"]


class TokenBucket:
    """Thread-safe; `acquire` blocks (sleeps) until a token is free."""

    def __init__(
        self,
        qps: float,
        burst: int,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError("a token bucket needs qps > 0 and burst >= 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._sleep = sleep
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()
        self.waited_s = 0.0  # total time callers spent waiting (for metrics and tests)
        self.taken = 0

    def _reserve(self, n: int) -> float:
        """Take n tokens (possibly going negative); how long the caller must wait."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= n
            self.taken += n
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
            self.waited_s += wait
            return wait

    def acquire(self, n: int = 1) -> float:
        """Take n tokens, sleeping until they are due; returns the time waited."""
        wait = self._reserve(n)
        if wait > 0:
            self._sleep(wait)
        return wait

    def try_acquire(self, n: int = 1) -> bool:
        """Take n tokens only if they are available now."""
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            if self._tokens < n:
                return False
            self._tokens -= n
            self.taken += n
            return True
