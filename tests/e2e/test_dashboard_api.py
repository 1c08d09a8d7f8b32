"""The dashboard's JSON API on a real gateway: PrivateData as Slurm keeps it, bearer tokens
on the TCP listener (none, forged, expired, another user's), and the queue as squeue has it.

Users are real local accounts (tester, tester2): over the Unix socket the gateway knows them
by SO_PEERCRED, over TCP by the token `caldera token` gave them.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import time
from pathlib import Path

from tests.support.dashboard_env import DashGateway, dash_gateway
from tests.support.gateway_env import CALDERA

__all__ = ["dash_gateway"]  # the fixture, used by name below

SECRET = "hunter2-dashboard-secret"


def _held(d: DashGateway, user: str, name: str, body: str = "true") -> int:
    """A held job of `user` (it stays pending, its script holding `body`)."""
    script = d.gw.workdir / f"{name}.sh"
    script.write_text(f"#!/bin/sh\n#SBATCH -J {name}\n{body}\n")
    os.chmod(script, 0o644)
    return d.gw.sbatch("-H", str(script), user=user)


def _b64(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def test_tcp_without_a_token_is_refused_but_the_empty_page_loads(dash_gateway: DashGateway) -> None:
    d = dash_gateway
    job = _held(d, "tester", "mine")
    for path in (
        "/ui/api/queue",
        f"/ui/api/jobs/{job}",
        "/ui/api/clusters",
        "/ui/api/whoami",
        "/ui/api/decisions",
        "/ui/api/fairshare",
        "/ui/api/topology",
    ):
        status, body = d.tcp(path)
        assert status == 401, (path, body)
        assert "mine" not in json.dumps(body)
    status, page = d.tcp("/ui/")
    assert status == 200
    assert "Caldera" in page
    assert "mine" not in page
    # the job API of the Unix socket is not on the TCP listener at all
    assert d.tcp("/v1/jobs", d.token("tester"))[0] == 404


def test_forged_expired_and_algorithm_none_tokens_are_refused(dash_gateway: DashGateway) -> None:
    d = dash_gateway
    good = d.token("tester")
    assert d.tcp("/ui/api/whoami", good)[1]["user"] == "tester"
    assert d.tcp("/ui/api/whoami", good, header="slurm")[1]["user"] == "tester"
    head, claims, sig = good.split(".")
    decoded = json.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    as_root = _b64({**decoded, "sun": "root"})
    forged = [
        f"{head}.{as_root}.{sig}",  # another user's name under tester's signature
        f"{_b64({'alg': 'none', 'typ': 'JWT'})}.{as_root}.",  # unsigned
        f"{head}.{claims}.{sig[:-4]}AAAA",  # a changed signature
        "not-a-token",
    ]
    for token in forged:
        assert d.tcp("/ui/api/whoami", token)[0] == 401, token
    short = d.token("tester", "--lifespan", "1")
    assert d.tcp("/ui/api/whoami", short)[0] == 200
    time.sleep(2.1)
    assert d.tcp("/ui/api/whoami", short)[0] == 401


def test_tokens_are_minted_over_the_socket_for_oneself_only(dash_gateway: DashGateway) -> None:
    d = dash_gateway
    token = d.token("tester")
    assert d.tcp("/v1/token", token, method="POST")[0] in (401, 404)
    r = d.token_run("tester", "--user", "tester2")
    assert r.returncode != 0
    assert "SLURM_JWT" not in r.stdout
    root_made = d.token(None, "--user", "tester2")  # an operator may
    assert d.tcp("/ui/api/whoami", root_made)[1]["user"] == "tester2"
    key = d.gw.home / "jwt_hs256.key"
    assert oct(key.stat().st_mode & 0o777) == "0o600"
    assert key.stat().st_uid == 0


def test_another_users_script_is_hidden_over_tcp_and_socket(dash_gateway: DashGateway) -> None:
    d = dash_gateway
    a_job = _held(d, "tester", "a-job", f"echo {SECRET}")
    b_job = _held(d, "tester2", "b-job", "echo b")
    a_token, b_token = d.token("tester"), d.token("tester2")
    status, own = d.tcp(f"/ui/api/jobs/{a_job}", a_token)
    assert status == 200
    assert own["may_read_private"]
    assert SECRET in own["private"]["script"]
    for status, other in (
        d.tcp(f"/ui/api/jobs/{a_job}", b_token),  # tester2's token
        d.unix(f"/ui/api/jobs/{a_job}", user="tester2"),  # tester2 on the socket
    ):
        assert status == 200
        assert other["job"]["name"] == "a-job"
        assert other["private"] is None
        assert not other["may_read_private"]
        assert SECRET not in json.dumps(other)
    # the queue never carries scripts, for anyone
    status, queue = d.tcp("/ui/api/queue?limit=500", b_token)
    assert {r["job_id"] for r in queue["rows"]} >= {a_job, b_job}
    assert SECRET not in json.dumps(queue)
    # an operator (root, over the socket) sees it
    assert SECRET in d.unix(f"/ui/api/jobs/{a_job}")[1]["private"]["script"]


def test_a_token_cannot_cancel_another_users_job(dash_gateway: DashGateway) -> None:
    d = dash_gateway
    b_job = _held(d, "tester2", "b-keep")
    a_job = _held(d, "tester", "a-drop")
    a_token = d.token("tester")
    status, body = d.tcp(f"/ui/api/jobs/{b_job}/cancel", a_token, method="POST")
    assert status == 403, body
    assert d.gw.job(b_job)["state"] == "PENDING"
    assert d.tcp(f"/ui/api/jobs/{b_job}/cancel", None, method="POST")[0] == 401
    status, body = d.tcp(f"/ui/api/jobs/{a_job}/cancel", a_token, method="POST")
    assert status == 200, body
    assert d.gw.wait(a_job, ("CANCELLED",))["state"] == "CANCELLED"


def test_the_queue_pages_show_the_jobs_squeue_shows(dash_gateway: DashGateway) -> None:
    d = dash_gateway
    ids = [_held(d, "tester", f"q{i}") for i in range(7)]
    ids += [_held(d, "tester2", f"r{i}") for i in range(5)]
    squeue = sorted(int(x) for x in d.gw.ok(["squeue", "-h", "-o", "%i"]).split())
    token = d.token("tester")
    seen: list[int] = []
    offset = 0
    while True:
        _, page = d.tcp(f"/ui/api/queue?limit=5&offset={offset}", token)
        assert len(page["rows"]) <= 5
        seen += [r["job_id"] for r in page["rows"]]
        offset += 5
        if offset >= page["matching"]:
            break
    assert seen == squeue == sorted(ids)
    _, page = d.tcp("/ui/api/queue?user=tester2&sort=id&order=desc", token)
    assert [r["job_id"] for r in page["rows"]] == sorted(ids[7:], reverse=True)
    assert page["counts"] == {"PENDING": 12}
    assert page["choices"]["users"] == ["tester", "tester2"]
    _, page = d.tcp("/ui/api/queue?state=R", token)
    assert page["matching"] == 0
    _, first = d.tcp(f"/ui/api/jobs/{ids[0]}", token)
    assert first["job"]["reason"] == "JobHeldUser"
    assert any("JobHeldUser" in line for line in first["why"])  # `caldera why`'s detail
    assert [e["kind"] for e in first["events"]][:1] == ["submit"]


def test_output_tail_is_shown_to_the_owner_only(dash_gateway: DashGateway) -> None:
    d = dash_gateway
    job = d.gw.sbatch("--wrap", "echo tail-line-1; echo tail-line-2", user="tester")
    d.gw.wait(job)
    _, own = d.tcp(f"/ui/api/jobs/{job}", d.token("tester"))
    assert own["private"]["output_tail"].splitlines()[-2:] == ["tail-line-1", "tail-line-2"]
    assert own["steps"], own  # the batch step, as sacct lists it
    _, other = d.tcp(f"/ui/api/jobs/{job}", d.token("tester2"))
    assert other["private"] is None
    assert "tail-line" not in json.dumps(other)


def test_clusters_show_drained_nodes_with_their_reason(dash_gateway: DashGateway) -> None:
    d = dash_gateway
    _, view = d.unix("/ui/api/clusters", user="tester")
    node = view["clusters"][0]["nodes"][0]["name"]
    d.gw.ok(["scontrol", "update", f"NodeName={node}", "State=DRAIN", "Reason=fan broken"])
    _, view = d.tcp("/ui/api/clusters", d.token("tester"))
    shown = next(n for c in view["clusters"] for n in c["nodes"] if n["name"] == node)
    assert shown["state"] == "DRAINED"
    assert shown["reason"] == "fan broken"
    part = view["clusters"][0]["partitions"][0]
    assert part["states"].get("DRAINED", 0) >= 1
    _, history = d.tcp("/ui/api/history", d.token("tester"))
    assert history["samples"]
    assert {"pending", "running", "cpus"} <= set(history["samples"][-1])


def test_a_listen_address_in_use_stops_caldera_up_with_the_reason(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        (home / "caldera.toml").write_text(f'[dashboard]\nlisten = "127.0.0.1:{port}"\n')
        env = {**os.environ, "CALDERA_HOME": str(home), "CALDERA_SOCKET": str(home / "g.sock")}
        try:
            up = subprocess.run(
                [*CALDERA, "up"], env=env, capture_output=True, text=True, timeout=60
            )
        finally:
            subprocess.run([*CALDERA, "down"], env=env, capture_output=True, timeout=60)
    assert up.returncode != 0
    assert "Address already in use" in up.stderr + up.stdout
