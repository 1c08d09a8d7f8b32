"""The API server liveness probe (k8s_bridge/liveness.py): silent after `silent_after_s`
without an answer, answering again at the first answer; a refusal is an answer. The real
server hung (SIGSTOP) is in tests/e2e/test_gateway_federation_k8s.py; here the answers are
scripted to pin the clock rules."""

from __future__ import annotations

from k8s_bridge.kube import KubeError
from k8s_bridge.liveness import ApiLiveness


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class _Server:
    """Answers GET /version with what `status` says: 200, an HTTP error, or nothing (0)."""

    def __init__(self) -> None:
        self.status = 200
        self.asked: list[tuple[float, float] | None] = []

    def request(self, method: str, path: str, **kw: object) -> dict[str, object]:
        assert (method, path) == ("GET", "/version")
        self.asked.append(kw.get("timeout"))  # type: ignore[arg-type]
        if self.status == 200:
            return {"major": "1"}
        raise KubeError("no", status=self.status, retryable=self.status in (0, 503))


def _probe(server: _Server, clock: _Clock) -> ApiLiveness:
    return ApiLiveness(server, "c", 2.0, 10.0, clock=clock)  # type: ignore[arg-type]


def test_silent_only_after_silent_after_s_without_an_answer() -> None:
    server, clock = _Server(), _Clock()
    live = _probe(server, clock)
    assert live.answering()  # a fresh probe is given the benefit of the doubt
    server.status = 0
    for _ in range(5):
        clock.now += 2.0
        assert not live.probe()
    assert live.answering()  # 10 s without an answer: not yet beyond
    clock.now += 0.5
    live.probe()
    assert not live.answering()
    server.status = 200
    assert live.probe()
    assert live.answering()
    assert server.asked[0] == (2.0, 2.0)  # a short timeout, not the client's 15 s


def test_a_refusal_is_an_answer() -> None:
    server, clock = _Server(), _Clock()
    live = _probe(server, clock)
    server.status = 403
    clock.now += 60
    assert live.probe()
    assert live.answering()


def test_interval_zero_turns_the_probe_off() -> None:
    server, clock = _Server(), _Clock()
    live = ApiLiveness(server, "c", 0.0, 10.0, clock=clock)  # type: ignore[arg-type]
    live.start()
    clock.now += 3600
    assert live.answering()
    assert server.asked == []
