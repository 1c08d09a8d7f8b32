"""The client's token bucket."""

from __future__ import annotations

import pytest

from k8s_bridge.ratelimit import TokenBucket


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def test_a_burst_passes_at_once_then_requests_are_spaced_at_the_rate() -> None:
    t = FakeTime()
    bucket = TokenBucket(qps=10, burst=5, clock=t.clock, sleep=t.sleep)
    for _ in range(5):
        assert bucket.acquire() == 0
    for _ in range(10):
        bucket.acquire()
    assert t.now == pytest.approx(1.0)  # 10 more at 10 per second
    assert bucket.taken == 15


def test_idle_time_refills_only_up_to_the_burst() -> None:
    t = FakeTime()
    bucket = TokenBucket(qps=100, burst=3, clock=t.clock, sleep=t.sleep)
    t.now = 1000.0
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="qps"):
        TokenBucket(qps=0, burst=1)
