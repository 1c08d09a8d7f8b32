"""What is sent to Slurm: sbatch options, slurmrestd's job description, the container wrapper."""

from __future__ import annotations

import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from gateway.model.jobspec import Sharing
from gateway.model.values import INFINITE, ArraySpec, GresItem, IndexRange, SignalSpec
from slurm_plugin.client import Identity
from slurm_plugin.config import ContainerConfig, OfferedPartition, SlurmClusterConfig
from slurm_plugin.container import ContainerError, archive_name, container_wrapper
from slurm_plugin.errors import SlurmRejected, SlurmUnreachable, classify_failure
from slurm_plugin.rest_job import RestUnsupported, rest_job_properties
from slurm_plugin.submit_args import build_request
from tests.support.slurm_jobs import make_launch, wrap

ROOT = Identity("root", 0, 0)
CONFIG = SlurmClusterConfig(
    name="hpc",
    instance="gw",
    partitions=(OfferedPartition("real", "hpc-real", True), OfferedPartition("gpu", "hpc-gpu")),
)


def test_the_submission_says_what_the_spec_says_and_drops_what_caldera_owns() -> None:
    fields: dict[str, Any] = dict(
        workdir="/w",
        partitions=("hpc-real",),
        account="xcore",
        nodes_min=2,
        nodes_max=3,
        ntasks_per_node=2,
        cpus_per_task=4,
        mincpus=4,
        mem_per_cpu_mb=500,
        gres=(GresItem("gpu", "a100", 2),),
        gpus_per_task=(GresItem("gpu", None, 1),),
        constraint="a100&real",
        sharing=Sharing.USER,
        time_limit=90,
        requeue=False,
        signal=SignalSpec(10, 120, batch_only=True),
        stdout="out-%j",
        extra=(("core-spec", "2"), ("spread-job", None)),
        burst="allowed",
        gpu_memory_mb=4096,
    )
    req = build_request(
        make_launch(5, wrap("true"), name="train", cluster="hpc", **fields), CONFIG, ROOT
    )
    assert req.options == (
        "--job-name=train",
        "--account=xcore",
        "--comment=caldera:gw:5",
        "--partition=real",
        "--nodes=2-3",
        "--ntasks-per-node=2",
        "--cpus-per-task=4",
        "--mincpus=4",
        "--mem-per-cpu=500",
        "--gres=gpu:a100:2",
        "--gpus-per-task=1",
        "--constraint=a100&real",
        "--exclusive=user",
        "--time=90",
        "--no-requeue",
        "--signal=B:USR1@120",
        "--chdir=/w",
        "--output=out-5",
        "--core-spec=2",
        "--spread-job",
    )
    unlimited = make_launch(6, wrap("true"), cluster="hpc", **{**fields, "time_limit": INFINITE})
    assert "--time=UNLIMITED" in build_request(unlimited, CONFIG, ROOT).options


def test_a_launch_becomes_a_tagged_submission_to_the_offered_partition() -> None:
    launch = make_launch(
        7,
        wrap("hostname"),
        workdir="/w",
        partitions=("hpc-real",),
        comment="mine",
        hold=True,
        cluster="hpc",
    )
    req = build_request(launch, CONFIG, ROOT, dependency="afterok:12")
    assert "--partition=real" in req.options
    assert "--comment=caldera:gw:7 mine" in req.options
    assert "--output=slurm-7.out" in req.options
    assert not any(o.startswith("--hold") for o in req.options)  # Caldera held it already
    assert req.dependency == "afterok:12"
    assert req.tag == "caldera:gw:7"
    assert req.environment["CALDERA_JOB_ID"] == "7"
    assert req.environment["CALDERA_CLUSTER"] == "hpc"
    assert req.script == launch.script


def test_an_array_task_is_a_one_task_slurm_array_named_after_caldera() -> None:
    launch = make_launch(
        31,
        wrap("true"),
        partitions=("hpc-gpu",),
        array_job_id=30,
        array_task=4,
        array=ArraySpec((IndexRange(0, 9, 1),), 0),
        cluster="hpc",
    )
    req = build_request(launch, CONFIG, ROOT)
    assert req.array_task == 4
    assert not any(o.startswith("--array") for o in req.options)  # the client adds =4
    assert "--output=slurm-30_4.out" in req.options
    assert req.environment["CALDERA_ARRAY_JOB_ID"] == "30"


def test_a_partition_the_cluster_does_not_offer_is_refused() -> None:
    launch = make_launch(8, wrap("true"), partitions=("debug",), cluster="hpc")
    with pytest.raises(SlurmRejected, match="Invalid partition name specified"):
        build_request(launch, CONFIG, ROOT)


def test_rest_job_description_and_what_22_05_cannot_take() -> None:
    launch = make_launch(
        9,
        wrap("true"),
        workdir="/w",
        partitions=("hpc-real",),
        ntasks=4,
        nodes_min=1,
        nodes_max=2,
        mem_per_node_mb=300,
        time_limit=5,
        sharing=Sharing.EXCLUSIVE,
        gpus=(GresItem("gpu", "a100", 2),),
        signal=SignalSpec(10, 90),
        begin=2_000_000_000,
        cluster="hpc",
    )
    req = build_request(launch, CONFIG, ROOT)
    job = rest_job_properties(req)
    assert job["partition"] == "real"
    assert job["nodes"] == "1-2"
    assert job["tasks"] == 4
    assert job["memory_per_node"] == 300
    assert job["time_limit"] == 5
    assert job["exclusive"] == "exclusive"
    assert job["gpus"] == "a100:2"
    assert job["signal"] == "USR1@90"
    assert job["comment"] == "caldera:gw:9"
    assert job["standard_output"] == "slurm-9.out"
    assert job["current_working_directory"] == "/w"
    assert job["environment"]["CALDERA_JOB_ID"] == "9"
    assert isinstance(job["begin_time"], str)
    bad = replace(req, spec=replace(req.spec, nodelist="node01", requeue=False), script_args=("a",))
    with pytest.raises(RestUnsupported) as err:
        rest_job_properties(bad)
    assert err.value.fields == ["--nodelist", "--no-requeue", "script arguments"]


def test_command_failures_are_classified() -> None:
    down = classify_failure(
        ["sbatch"],
        1,
        "",
        "sbatch: error: Batch job submission failed: Unable to contact slurm controller "
        "(connect failure)\n",
    )
    assert isinstance(down, SlurmUnreachable)
    assert down.retryable
    bad = classify_failure(
        ["sbatch"],
        1,
        "",
        "sbatch: error: Batch job submission failed: Invalid partition name specified\n",
    )
    assert isinstance(bad, SlurmRejected)
    assert not bad.retryable
    assert bad.errno == 2000
    assert (
        str(bad) == "sbatch: error: Batch job submission failed: Invalid partition name specified"
    )


def _fake_podman(tmp_path: Path) -> Path:
    """A stand-in `podman` that records its arguments and runs the script on the host."""
    fake = tmp_path / "podman"
    log = tmp_path / "calls"
    fake.write_text(
        "#!/bin/sh\n"
        f'echo "$*" >>{log}\n'
        'case "$1" in image) exit 1;; load) exit 0;; esac\n'
        "for last; do :; done\n"
        'script=""; prev=""\n'
        'for a; do case "$prev" in -v) case "$a" in *:/.caldera/script:ro) '
        'script="${a%%:/.caldera/script:ro}";; esac;; esac; prev="$a"; done\n'
        'exec sh "$script" "$@"\n'
    )
    fake.chmod(0o755)
    return log


def test_the_container_wrapper_runs_the_script_with_podman(tmp_path: Path) -> None:
    log = _fake_podman(tmp_path)
    config = ContainerConfig(
        runtime_path=str(tmp_path / "podman"),
        image_archive_dir=str(tmp_path),
        containers_conf="/c.conf",
    )
    (tmp_path / archive_name("localhost/img:1")).write_text("")
    script = "#!/bin/sh\necho inside $CALDERA_X\nexit 4\n"
    text = container_wrapper(
        script, "localhost/img:1", str(tmp_path), config, mounts=("/data:/data:ro",), name="j"
    )
    assert archive_name("localhost/img:1") == "localhost_img_1.tar"
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(text)
    env = {**os.environ, "CALDERA_X": "42", "SLURM_JOB_ID": "77", "TMPDIR": str(tmp_path)}
    proc = subprocess.run(
        ["sh", str(wrapper)], capture_output=True, text=True, env=env, cwd=tmp_path, check=False
    )
    assert proc.returncode == 4, proc.stderr
    assert proc.stdout == "inside 42\n"
    calls = log.read_text().splitlines()
    assert calls[0] == "image exists localhost/img:1"
    assert calls[1].startswith("load -q -i ")
    run = calls[2]
    assert run.startswith("run --rm --network=host --env-host ")
    assert f"-v {tmp_path}:{tmp_path} -w {tmp_path}" in run
    assert "-v /data:/data:ro" in run
    assert "--name=j-77" in run
    assert run.endswith("localhost/img:1 /.caldera/script")
    assert not list(tmp_path.glob("caldera-job.*"))  # cleaned up


def test_containers_can_be_disabled() -> None:
    with pytest.raises(ContainerError, match="not enabled"):
        container_wrapper("#!/bin/sh\n", "img", "/w", ContainerConfig(runtime="none"))
