"""The launcher that runs inside job pods (k8s_bridge/pod_launcher.py, pod_launch_plan.py):
frames, authentication, argv never through a shell, srun's layout against the local
runner's (containers/srun_layout.py), and a whole srun over a real agent on this machine."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.srun_layout import SrunExit as LayoutExit
from containers.srun_layout import plan_step
from gateway.compat.job_env import TaskIds, compress_hostlist, task_environment
from gateway.model.jobspec import JobSpec
from k8s_bridge import launch, pod_agent
from k8s_bridge import pod_launch_plan as lp
from k8s_bridge import pod_wire as wire
from k8s_bridge.names import GangNames
from k8s_bridge.options import GangMode, K8sOptions
from k8s_bridge.pod_steps import split_message, srun_steps
from k8s_bridge.render import render_gang
from k8s_bridge.request import GangRequest

REPO = Path(__file__).resolve().parents[2]
TOKEN = b"0123456789abcdef" * 4


def test_frames_round_trip_and_refuse_oversize_or_truncated() -> None:
    data = (
        wire.frame(wire.OUT, b"hello")
        + wire.frame(wire.EXIT, b"")
        + wire.frame(wire.ERR, b"x" * 70000)
    )
    stream = io.BytesIO(data)
    assert wire.read_frame(stream) == (wire.OUT, b"hello")
    assert wire.read_frame(stream) == (wire.EXIT, b"")
    assert wire.read_frame(stream) == (wire.ERR, b"x" * 70000)
    with pytest.raises(EOFError):
        wire.read_frame(stream)
    with pytest.raises(wire.ProtocolError, match="too large"):
        wire.read_frame(io.BytesIO(b"o" + (wire.MAX_FRAME + 1).to_bytes(4, "big")))
    with pytest.raises(wire.ProtocolError, match="truncated"):
        wire.read_frame(io.BytesIO(wire.frame(wire.OUT, b"hello")[:-2]))
    with pytest.raises(wire.ProtocolError):
        wire.frame(wire.OUT, b"x" * (wire.MAX_FRAME + 1))


def test_proof_needs_the_token_the_nonce_and_the_same_request() -> None:
    nonce, req = os.urandom(32), b'{"argv": ["hostname"], "env": {}}'
    answer = wire.proof(TOKEN, nonce, req)
    assert len(answer) == wire.AUTH_SIZE
    assert wire.authentic(TOKEN, nonce, answer)
    assert wire.matches(answer, req)
    assert not wire.authentic(TOKEN, nonce, wire.proof(TOKEN[:-1] + b"x", nonce, req))
    assert not wire.authentic(TOKEN, nonce, wire.proof(TOKEN, os.urandom(32), req))  # replay
    evil = b'{"argv": ["rm", "-rf", "/"], "env": {}}'
    assert not wire.matches(answer, evil)  # a request swapped after the proof
    forged = wire.proof(TOKEN, nonce, evil)[:32] + answer[32:]  # its digest, the old HMAC
    assert not wire.authentic(TOKEN, nonce, forged)
    assert not wire.authentic(b"", nonce, wire.proof(b"", nonce, req))  # empty token: nothing
    assert not wire.authentic(TOKEN, nonce, answer[:-1])  # short


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b'{"argv": "sh -c id", "env": {}}',
        b'{"argv": [], "env": {}}',
        b'{"argv": ["id", 3], "env": {}}',
        b'{"argv": ["id"], "env": {"A": 1}}',
    ],
)
def test_bad_requests_are_refused(payload: bytes) -> None:
    with pytest.raises(wire.ProtocolError):
        wire.parse_request(payload)


@pytest.fixture
def agent() -> Iterator[int]:
    srv = pod_agent.server(0, TOKEN, "node-b")
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv.server_address[1]
    srv.shutdown()
    srv.server_close()


def _talk(port: int, token: bytes, argv: list[str], cwd: str) -> list[tuple[bytes, bytes]]:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        rfile = sock.makefile("rb")
        kind, nonce = wire.read_frame(rfile)
        assert kind == wire.HELLO
        assert len(nonce) == 32
        request = {"argv": argv, "env": {"PATH": os.environ["PATH"]}, "cwd": cwd}
        body = json.dumps(request).encode()
        sock.sendall(
            wire.frame(wire.AUTH, wire.proof(token, nonce, body)) + wire.frame(wire.REQUEST, body)
        )
        frames = []
        while True:
            try:
                frames.append(wire.read_frame(rfile))
            except EOFError:
                return frames


def test_a_wrong_token_is_refused_and_runs_nothing(agent: int, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    frames = _talk(agent, b"wrong" * 8, ["touch", str(marker)], str(tmp_path))
    assert frames == [(wire.FAIL, b"authentication failed")]
    assert not marker.exists()


def test_an_unauthenticated_peer_cannot_send_more_than_its_proof(agent: int) -> None:
    """Before the token is proven the agent reads one AUTH frame of AUTH_SIZE bytes: a peer
    announcing a large frame (a request first, as the old protocol had it) is cut off
    without the agent reading it."""

    def too_large(size: int) -> bytes:
        return f"frame of {size} bytes is too large".encode()

    for kind, size in ((wire.REQUEST, 4 << 20), (wire.AUTH, wire.AUTH_SIZE + 1)):
        with socket.create_connection(("127.0.0.1", agent), timeout=20) as sock:
            rfile = sock.makefile("rb")
            assert wire.read_frame(rfile)[0] == wire.HELLO
            sock.sendall(kind + size.to_bytes(4, "big"))
            assert wire.read_frame(rfile) == (wire.FAIL, too_large(size))
            with pytest.raises(EOFError):  # and the connection is closed
                wire.read_frame(rfile)


def test_a_request_other_than_the_one_proven_runs_nothing(agent: int, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    with socket.create_connection(("127.0.0.1", agent), timeout=20) as sock:
        rfile = sock.makefile("rb")
        kind, nonce = wire.read_frame(rfile)
        proven = json.dumps({"argv": ["true"], "env": {}, "cwd": "/"}).encode()
        other = json.dumps({"argv": ["touch", str(marker)], "env": {}, "cwd": "/"}).encode()
        sock.sendall(
            wire.frame(wire.AUTH, wire.proof(TOKEN, nonce, proven))
            + wire.frame(wire.REQUEST, other)
        )
        kind, text = wire.read_frame(rfile)
    assert (kind, text) == (wire.FAIL, b"the request is not the one authenticated")
    assert not marker.exists()


def test_argv_is_executed_without_a_shell(agent: int, tmp_path: Path) -> None:
    marker = tmp_path / "injected"
    evil = f"$(touch {marker}); `touch {marker}` | touch {marker}"
    frames = _talk(agent, TOKEN, ["printf", "%s|", evil, "*"], str(tmp_path))
    out = b"".join(p for k, p in frames if k == wire.OUT)
    assert out == f"{evil}|*|".encode()  # every word as given, no expansion
    assert frames[-1] == (wire.EXIT, b'{"status": 0}')
    assert not marker.exists()


def test_exit_status_and_missing_program(agent: int, tmp_path: Path) -> None:
    frames = _talk(agent, TOKEN, ["sh", "-c", "echo oops >&2; exit 7"], str(tmp_path))
    assert (wire.ERR, b"oops\n") in frames
    assert json.loads(frames[-1][1]) == {"status": 7 << 8}
    frames = _talk(agent, TOKEN, ["/no/such/prog"], str(tmp_path))
    assert b"execve(): /no/such/prog: No such file or directory" in frames[0][1]
    assert json.loads(frames[-1][1]) == {"status": 2 << 8}


# --- srun's layout: the same as the local runner's ------------------------------------

ALLOC = {
    "SLURM_JOB_ID": "42",
    "SLURM_JOB_NODELIST": "caldera-42-[0-1]",
    "SLURM_NNODES": "2",
    "SLURM_JOB_CPUS_PER_NODE": "4(x2)",
    "SLURM_TASKS_PER_NODE": "1(x2)",
    "SLURM_NTASKS": "2",
    "SLURMD_NODENAME": "caldera-42-0",
}


@pytest.mark.parametrize(
    "argv",
    [
        ["hostname"],
        ["-n", "4", "env"],
        ["-N", "2", "hostname"],
        ["-n1", "x"],
        ["-N", "1", "-n", "3", "x"],
        ["--ntasks-per-node=2", "x"],
        ["-w", "caldera-42-1", "x"],
        ["-n", "9", "x"],
        ["-N", "3", "x"],
        ["-c", "2", "-n", "4", "x"],
        ["-n", "5", "-c", "2", "x"],
        ["--ntasks-per-node=3", "-N2", "-n4", "x"],
        ["--bogus", "x"],
        ["-n", "zero", "x"],
        ["-l"],
        [
            "--kill-on-bad-exit",
            "--cpu-bind=none",
            "--nodes=1",
            "--nodelist=caldera-42-1",
            "--ntasks=1",
            "orted",
            "-mca",
            "ess",
            "slurm",
        ],
    ],
)
def test_layout_matches_the_local_runner(argv: list[str]) -> None:
    try:
        step = plan_step(argv, ALLOC)
        want: object = (
            list(step.nodes),
            list(step.tasks_per_node),
            step.cpus_per_task,
            list(step.warnings),
            list(step.command),
        )
    except LayoutExit as exc:
        want = (list(exc.lines), exc.status)
    try:
        opts, command = lp.parse(argv, ALLOC)
        nodes, layout, cpt, warnings = lp.plan(opts, ALLOC)
        got: object = (nodes, layout, cpt, warnings, command)
    except lp.SrunExit as exc:
        got = (list(exc.lines), exc.status)
    assert got == want


def test_task_environment_matches_the_local_runner() -> None:
    nodes, layout = ["caldera-42-0", "caldera-42-1"], [3, 1]
    for rank in range(4):
        mine = lp.task_env(
            ALLOC,
            step_id=2,
            nodes=nodes,
            layout=layout,
            rank=rank,
            cpus_per_task=None,
            opts={"label": None},
        )
        ids = TaskIds(rank, rank if rank < 3 else 0, 0 if rank < 3 else 1)
        theirs = task_environment(
            ALLOC, step_id=2, ntasks=4, nodes=nodes, tasks_on_nodes=layout, task=ids, label=True
        )
        theirs["SLURMD_NODENAME"] = nodes[ids.nodeid]  # srun.py sets it per task
        assert {k: v for k, v in mine.items() if k in theirs} == theirs
        assert mine["SLURMD_NODENAME"] == nodes[ids.nodeid] == mine["HOSTNAME"]
    names = ["a1", "a2", "a3", "a5", "b", "c01", "c02"]
    assert lp.compress(names) == compress_hostlist(names)
    assert lp.expand("x-[0-2,5],y,z0[8-9]") == ["x-0", "x-1", "x-2", "x-5", "y", "z08", "z09"]
    assert lp.compress_counts([2, 2, 2, 1]) == "2(x3),1"


# --- a whole srun: this process's pod is caldera-42-0, the agent is caldera-42-1 ---------


def _srun(
    tmp_path: Path,
    port: int,
    *argv: str,
    token: bytes = TOKEN,
    extra: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    link = tmp_path / "srun"
    if not link.exists():
        link.symlink_to(REPO / "k8s_bridge" / "pod_launcher.py")
    (tmp_path / "token").write_bytes(token)
    (tmp_path / "hosts").write_text("127.0.0.1 caldera-42-1 caldera-42-1.caldera-42\n")
    env = {
        **os.environ,
        **ALLOC,
        "PYTHONPATH": str(REPO),
        "TMPDIR": str(tmp_path),
        "CALDERA_AGENT_PORT": str(port),
        "CALDERA_TOKEN_FILE": str(tmp_path / "token"),
        "CALDERA_HOSTS_FILE": str(tmp_path / "hosts"),
        "CALDERA_HOSTS_WAIT": "2",
        "CALDERA_STEP_LOG": str(tmp_path / "termination-log"),
        **(extra or {}),
    }
    (tmp_path / "termination-log").touch()
    return subprocess.run(
        [sys.executable, str(link), *argv],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_srun_runs_every_task_with_its_ids(agent: int, tmp_path: Path) -> None:
    show = "echo $SLURM_PROCID $SLURM_LOCALID $SLURM_NODEID $SLURM_STEP_ID $SLURMD_NODENAME"
    done = _srun(tmp_path, agent, "-l", "-n", "4", "sh", "-c", show)
    assert done.returncode == 0, done.stderr
    lines = sorted(done.stdout.splitlines())
    assert lines == [
        "0: 0 0 0 0 caldera-42-0",
        "1: 1 1 0 0 caldera-42-0",
        "2: 2 0 1 0 caldera-42-1",
        "3: 3 1 1 0 caldera-42-1",
    ]
    again = _srun(tmp_path, agent, "-N", "2", "sh", "-c", show)
    assert sorted(again.stdout.splitlines()) == ["0 0 0 1 caldera-42-0", "1 0 1 1 caldera-42-1"]


def test_steps_hold_the_pods_gpus_as_a_local_jobs_steps_hold_a_nodes(
    agent: int, tmp_path: Path
) -> None:
    """The job holds each pod's GPUs 0..k-1 (CALDERA_JOB_GPUS, k8s_bridge/slurm_env.py): a
    step's tasks see only the step's share of their pod's, and two steps running at once
    on one pod get different GPUs (slurmctld's `_step_alloc`, as the local runner)."""
    held = '{"nodes":{"caldera-42-0":[0,1],"caldera-42-1":[0,1]},"per_job":0,'
    held += '"per_node":2,"per_task":0,"type":null}'
    extra = {"CALDERA_JOB_GPUS": held, "CUDA_VISIBLE_DEVICES": "0,1"}
    show = "echo $SLURMD_NODENAME $CUDA_VISIBLE_DEVICES $SLURM_STEP_GPUS $SLURM_GPUS_ON_NODE"
    one = _srun(tmp_path, agent, "-N2", "--gres=gpu:1", "sh", "-c", show, extra=extra)
    assert one.returncode == 0, one.stderr
    assert sorted(one.stdout.splitlines()) == ["caldera-42-0 0 0 1", "caldera-42-1 0 0 1"]
    both = _srun(tmp_path, agent, "-N2", "sh", "-c", show, extra=extra)  # the job's own ask
    assert sorted(both.stdout.splitlines()) == ["caldera-42-0 0,1 0,1 2", "caldera-42-1 0,1 0,1 2"]
    srun = tmp_path / "srun"
    script = (
        f"for i in 1 2; do {sys.executable} {srun} -w caldera-42-0 -n1 --exact --gres=gpu:1 "
        "sh -c 'echo $CUDA_VISIBLE_DEVICES; sleep 1' & done; wait"
    )
    done = _srun(tmp_path, agent, "-w", "caldera-42-0", "-N1", "-n1", "--overlap", "--gres=none",
                 "sh", "-c", script, extra=extra)  # fmt: skip
    assert sorted(done.stdout.split()) == ["0", "1"], done.stderr


def test_srun_exit_code_is_the_highest_and_failures_are_reported(
    agent: int, tmp_path: Path
) -> None:
    done = _srun(tmp_path, agent, "sh", "-c", "exit $((SLURM_PROCID * 3 + 2))")
    assert done.returncode == 5
    assert done.stderr.splitlines() == [
        "srun: error: caldera-42-1: task 1: Exited with exit code 5",
        "srun: error: caldera-42-0: task 0: Exited with exit code 2",
    ]
    killed = _srun(tmp_path, agent, "-w", "caldera-42-1", "-n1", "sh", "-c", "kill -9 $$")
    assert killed.returncode == 137
    assert "task 0: Killed" in killed.stderr


def test_each_step_is_recorded_in_the_termination_message(agent: int, tmp_path: Path) -> None:
    """What the backend reads back for sacct (k8s_bridge/pod_steps.py): the step's id, name,
    the NODEIDs of its nodes, its tasks and its status as slurmctld records it."""
    assert _srun(tmp_path, agent, "-n", "4", "true").returncode == 0
    failed = _srun(tmp_path, agent, "-J", "named", "sh", "-c", "exit $((SLURM_PROCID + 2))")
    assert failed.returncode == 3
    assert _srun(tmp_path, agent, "-w", "caldera-42-1", "-n1", "hostname").returncode == 0
    text = (tmp_path / "termination-log").read_text()
    assert split_message(text)[1] == ""  # nothing but records
    records = [json.loads(line) for line in split_message(text)[0]]
    assert [
        (r["step_id"], r["name"], r["ranks"], r["ntasks"], r["exit_code"], r["state"])
        for r in records
    ] == [
        ("0", "true", [0, 1], 4, 0, "COMPLETED"),
        ("1", "named", [0, 1], 2, 3 << 8, "FAILED"),
        ("2", "hostname", [1], 1, 0, "COMPLETED"),
    ]
    assert all(r["start_time"] <= r["end_time"] for r in records)
    steps = srun_steps(split_message(text)[0], 42, 0, {0: "node-a", 1: "node-b"})
    assert [s.nodes for s in steps] == [("node-a", "node-b"), ("node-a", "node-b"), ("node-b",)]


def test_srun_with_a_wrong_token_runs_nothing_remote(agent: int, tmp_path: Path) -> None:
    done = _srun(tmp_path, agent, "-N", "2", "hostname", token=b"x" * 64)
    assert done.returncode == 1
    assert "task 1 launch failed: authentication failed" in done.stderr


def test_srun_refuses_as_slurm_does(agent: int, tmp_path: Path) -> None:
    done = _srun(tmp_path, agent, "-N", "3", "hostname")
    assert (done.returncode, done.stderr) == (
        1,
        "srun: error: Only allocated 2 nodes asked for 3\n",
    )


def test_srun_multi_prog_runs_each_ranks_program_across_the_pods(
    agent: int, tmp_path: Path
) -> None:
    """The local runner's --multi-prog rules (containers/multi_prog.py), ranks on the remote
    pod through its agent; a file srun cannot use stops it before any task."""
    conf = tmp_path / "mp.conf"
    conf.write_text("0,2 echo first %t %o\n# a comment\n* sh -c 'echo rest $SLURMD_NODENAME'\n")
    done = _srun(tmp_path, agent, "-l", "-n", "4", "--multi-prog", str(conf))
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == [
        "0: first 0 0",
        "1: rest caldera-42-0",
        "2: first 2 1",
        "3: rest caldera-42-1",
    ]
    conf.write_text("0 true\n")
    bad = _srun(tmp_path, agent, "-n", "2", "--multi-prog", str(conf))
    assert (bad.returncode, bad.stderr) == (
        1,
        f"srun: error: {conf}: no program for task(s) 1\n",
    )


def test_srun_output_and_error_files_per_task_across_the_pods(agent: int, tmp_path: Path) -> None:
    """-o/-e as the local runner's srun: the tasks' streams in the files the pattern names
    (no -l label there), stderr in the -o file unless -e names another; -i stays refused."""
    talk = "echo out $SLURM_PROCID $SLURMD_NODENAME; echo err $SLURM_PROCID >&2"
    done = _srun(tmp_path, agent, "-l", "-n", "4", "-o", "o-%t-%N.%j", "sh", "-c", talk)
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    for rank, node in enumerate(["caldera-42-0"] * 2 + ["caldera-42-1"] * 2):
        text = (tmp_path / f"o-{rank}-{node}.{ALLOC['SLURM_JOB_ID']}").read_text()
        assert sorted(text.splitlines()) == [f"err {rank}", f"out {rank} {node}"]
    split = _srun(tmp_path, agent, "-N", "2", "-o", "o-%2n", "-e", "e-%s", "sh", "-c", talk)
    assert (split.returncode, split.stdout, split.stderr) == (0, "", "")
    assert (tmp_path / "o-00").read_text() == "out 0 caldera-42-0\n"
    assert (tmp_path / "o-01").read_text() == "out 1 caldera-42-1\n"
    assert sorted((tmp_path / "e-1").read_text().splitlines()) == ["err 0", "err 1"]
    only_err = _srun(tmp_path, agent, "-N", "2", "-e", "e-%t", "sh", "-c", talk)
    assert sorted(only_err.stdout.splitlines()) == ["out 0 caldera-42-0", "out 1 caldera-42-1"]
    assert (tmp_path / "e-1").read_text() == "err 1\n"  # step 2 truncated step 1's e-1
    lost = _srun(tmp_path, agent, "-N", "2", "-o", "nodir/o-%t", "sh", "-c", "echo ran >ran")
    assert (lost.returncode, lost.stderr) == (
        1,
        f"srun: error: {tmp_path}/nodir/o-0: No such file or directory\n",
    )
    assert not (tmp_path / "ran").exists()  # no task started
    stdin = _srun(tmp_path, agent, "-i", "in-%t", "true")
    assert (stdin.returncode, stdin.stderr) == (
        1,
        "srun: error: --input is not supported in Kubernetes jobs\n",
    )


# --- what the backend gives the pods (k8s_bridge/launch.py, render.py) ---------------


def test_hosts_file_once_every_rank_has_an_address() -> None:
    names = GangNames("caldera", 42)
    assert launch.hosts_text(names, 2, {0: "10.79.1.5"}) is None
    assert launch.hosts_text(names, 2, {0: "10.79.1.5", 1: None}) is None
    assert launch.hosts_text(names, 1, {0: "10.79.1.5"}) is None  # no other rank to reach
    text = launch.hosts_text(names, 2, {0: "10.79.1.5", 1: "10.79.2.7"})
    assert text is not None
    assert lp.parse_hosts(text + "# comment\n") == {
        "caldera-42-0": "10.79.1.5",
        "caldera-42-0.caldera-42": "10.79.1.5",
        "caldera-42-1": "10.79.2.7",
        "caldera-42-1.caldera-42": "10.79.2.7",
    }


def test_the_token_is_per_attempt_and_per_gateway_key() -> None:
    key = b"k" * 32
    first = launch.job_token(key, GangNames("caldera", 42))
    assert first == launch.job_token(key, GangNames("caldera", 42))  # retries agree
    assert len(first) == 64
    assert first != launch.job_token(key, GangNames("caldera", 42, 1))
    assert first != launch.job_token(key, GangNames("caldera", 43))
    assert first != launch.job_token(b"x" * 32, GangNames("caldera", 42))
    assert K8sOptions().launcher_key != K8sOptions().launcher_key  # random per process


def test_pods_mount_the_launcher_and_a_private_token_and_workers_run_no_user_text() -> None:
    script = "#!/bin/sh\necho $(id) `x`; srun hostname\n"
    spec = JobSpec(name="a;b $(x)", workdir="/tmp", nodes_min=2)
    req = GangRequest(
        job_id=7,
        spec=spec,
        user="alice",
        uid=1000,
        gid=1234,
        script=script,
        environment={"PATH": "/opt/bin:/usr/bin"},
        partition="k8s",
        cluster="c",
    )
    gang = render_gang(req, K8sOptions(), GangMode.CALDERA)
    token = gang.root["data"]["token"]
    assert len(token) == 64
    assert gang.root["data"]["hosts"] == ""
    for rank, pod in enumerate(gang.pods):
        spec_ = pod["spec"]
        assert spec_["securityContext"]["fsGroup"] == 1234  # the job's group reads the token
        job_items = next(v for v in spec_["volumes"] if v["name"] == "job")["configMap"]["items"]
        assert {"key": "token", "path": "token", "mode": 0o400} in job_items
        launcher = next(v for v in spec_["volumes"] if v["name"] == "launcher")["configMap"]
        assert launcher["name"] == "caldera-launcher"
        container = spec_["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["PATH"] == "/caldera/launch/bin:/opt/bin:/usr/bin"
        if rank:
            assert tuple(container["command"]) == launch.WORKER_COMMAND
            assert token not in json.dumps(pod)  # the token only reaches the pod as a file
    data = launch.launcher_configmap("caldera", "ns", "c")["data"]
    assert data["launcher"] == (REPO / "k8s_bridge" / "pod_launcher.py").read_text()


def test_the_shipped_files_need_only_the_standard_library(tmp_path: Path) -> None:
    """Laid out as the pod's volume lays it out (no caldera package on the path): only the
    standard library and the shipped modules get imported."""
    data = launch.launcher_configmap("caldera", "ns", "c")["data"]
    for item in launch.launcher_volume("caldera")["configMap"]["items"]:
        (tmp_path / item["path"]).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / item["path"]).write_text(data[item["key"]])
    probe = (
        f"import sys, runpy; sys.path[:0] = [{str(tmp_path / 'lib')!r}]; "
        f"runpy.run_path({str(tmp_path / 'launcher.py')!r}); "
        "names = {m.split('.')[0] for m in sys.modules} - {'__main__'}; "
        "print(sorted(names - set(sys.stdlib_module_names)))"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", probe], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['containers', 'k8s_bridge']"  # the shipped modules
    assert "k8s_bridge.pod_launch_plan" in data["launcher"]
    assert "k8s_bridge.pod_wire" in data["launcher"]


def test_srun_forwards_signals_to_remote_tasks(agent: int, tmp_path: Path) -> None:
    link = tmp_path / "srun"
    link.symlink_to(REPO / "k8s_bridge" / "pod_launcher.py")
    (tmp_path / "token").write_bytes(TOKEN)
    (tmp_path / "hosts").write_text("127.0.0.1 caldera-42-1\n")
    env = {
        **os.environ,
        **ALLOC,
        "PYTHONPATH": str(REPO),
        "TMPDIR": str(tmp_path),
        "CALDERA_AGENT_PORT": str(agent),
        "CALDERA_TOKEN_FILE": str(tmp_path / "token"),
        "CALDERA_HOSTS_FILE": str(tmp_path / "hosts"),
    }
    task = "trap 'echo got-usr1; exit 3' USR1; echo ready; while :; do sleep 0.1; done"
    argv = [sys.executable, str(link), "-w", "caldera-42-1", "-n1", "sh", "-c", task]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == b"ready\n"  # the remote task runs
    proc.send_signal(signal.SIGUSR1)
    out, err = proc.communicate(timeout=30)
    assert out == b"got-usr1\n"
    assert proc.returncode == 3, err


def test_srun_without_an_address_for_a_rank_says_so(agent: int, tmp_path: Path) -> None:
    (tmp_path / "hosts").write_text("")
    link = tmp_path / "srun"
    link.symlink_to(REPO / "k8s_bridge" / "pod_launcher.py")
    env = {
        **os.environ,
        **ALLOC,
        "PYTHONPATH": str(REPO),
        "CALDERA_HOSTS_FILE": str(tmp_path / "hosts"),
        "CALDERA_HOSTS_WAIT": "1",
    }
    done = subprocess.run(
        [sys.executable, str(link), "-N", "2", "true"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr == f"srun: error: no address for caldera-42-1 in {tmp_path / 'hosts'}\n"


def test_srun_chdir_applies_to_every_task(agent: int, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    done = _srun(tmp_path, agent, "-D", "sub", "-N", "2", "pwd")
    assert done.stdout.splitlines() == [str(tmp_path / "sub")] * 2, done.stderr


@pytest.mark.parametrize(
    ("env", "argv"),
    [
        ({"SLURM_EXACT": "1"}, ["--whole", "x"]),
        ({"SLURM_OVERLAP": "1"}, ["--exclusive", "x"]),
        ({"SRUN_CPUS_PER_TASK": "2"}, ["-n", "4", "x"]),
        ({"SLURM_GPUS_PER_TASK": "1", "SLURM_JOB_GPUS": "0,1"}, ["--gpus-per-node=2", "x"]),
        ({"SLURM_LABELIO": "1"}, ["-n2", "x"]),
    ],
)
def test_options_from_the_environment_match_the_local_runner(
    env: dict[str, str], argv: list[str]
) -> None:
    """srun reads SLURM_EXACT, SLURM_OVERLAP, SRUN_CPUS_PER_TASK... in the pods as locally
    (containers/step_rules.py holds srun's env_vars table for both)."""
    full = {**ALLOC, **env}
    try:
        step = plan_step(argv, full)
        want: object = (dict(step.options), list(step.tasks_per_node), step.cpus_per_task)
    except LayoutExit as exc:
        want = (list(exc.lines), exc.status)
    try:
        opts, _ = lp.parse(argv, full)
        _, layout, cpt, _ = lp.plan(opts, full)
        got: object = (opts, layout, cpt)
    except lp.SrunExit as exc:
        got = (list(exc.lines), exc.status)
    assert got == want


def test_a_task_gets_srun_umask_as_slurmstepd_applies_it() -> None:
    # srun passes its umask as SLURM_UMASK (0022; 0077 after `umask 077`, as on the test
    # cluster); the task in the pod starts with it, or unchanged when it is absent or junk
    assert lp.task_umask({"SLURM_UMASK": "0077"}) == 0o077
    assert lp.task_umask({"SLURM_UMASK": "0022"}) == 0o022
    assert lp.task_umask({}) == -1
    assert lp.task_umask({"SLURM_UMASK": "09"}) == -1
    assert lp.task_umask({"SLURM_UMASK": "17777"}) == -1
