"""The cyclic garbage collector paused for the length of a scheduling cycle.

Why: a cycle over 100,000 pending jobs keeps tens of thousands of containers alive while
it runs (views, windows, node records, steps); the young collections it triggers promote
them, and every second or third cycle that set off a full collection of the whole heap
(the snapshot's jobs): ~0.2 s of a ~0.7 s cycle. What a cycle makes is freed by reference
counting when it returns, so with the collector paused it is never traversed at all; a
cycle that made a reference cycle would only leave it to the next collection. Nested and
concurrent cycles share one pause, and the collector is enabled again after the last one
only if it was enabled when the first began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


class _Pause:
    """How many cycles are running, and whether the collector ran before the first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = 0
        self.resume = False


_PAUSE = _Pause()


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic collection inside the block (reference counting still frees)."""
    with _PAUSE.lock:
        if _PAUSE.depth == 0:
            _PAUSE.resume = gc.isenabled()
            gc.disable()
        _PAUSE.depth += 1
    try:
        yield
    finally:
        with _PAUSE.lock:
            _PAUSE.depth -= 1
            if _PAUSE.depth == 0 and _PAUSE.resume:
                gc.enable()
