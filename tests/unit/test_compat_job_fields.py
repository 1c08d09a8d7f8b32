"""The request fields of `scontrol show job`, predicted from a JobSpec and the site."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from gateway.compat.job_fields import JobIdentity, SiteDefaults, format_mem, request_fields
from gateway.compat.optypes import ParseContext
from gateway.compat.sbatch import parse_sbatch

CTX = ParseContext(cwd="/w", now=1_800_000_000.0, max_array_size=1001)
SITE = SiteDefaults(default_partition="debug", def_mem_per_cpu_mb=100)
ME = JobIdentity(job_id=77, user="alice", account="physics")


def fields(*argv: str, ident: JobIdentity = ME, site: SiteDefaults = SITE) -> dict[str, str]:
    req = parse_sbatch(["sbatch", *argv, "/w/job.sh"], "#!/bin/sh\ntrue\n", {}, CTX)
    return request_fields(req.spec, ident, site)


def test_defaults_come_from_the_site_and_the_user() -> None:
    got = fields()
    assert got["Partition"] == "debug"
    assert got["Account"] == "physics"
    assert got["TimeLimit"] == "UNLIMITED"
    assert got["MinMemoryCPU"] == "100M"
    assert got["StdOut"] == "/w/slurm-77.out"
    assert got["Requeue"] == "1"


def test_request_values_print_like_scontrol() -> None:
    got = fields("-t", "1-2:30", "--mem=4G", "-N", "2", "--exclusive", "--nice=5")
    assert (got["TimeLimit"], got["MinMemoryNode"], got["NumNodes"]) == ("1-02:30:00", "4G", "2-2")
    assert (got["OverSubscribe"], got["Nice"]) == ("NO", "5")


def test_gres_text_is_shown_as_recorded() -> None:
    got = fields("--gres=craynetwork,qpu:2k", "--gpus-per-node=a100:1")
    assert got["TresPerNode"] == "gres:gpu:a100:1,gres:craynetwork,gres:qpu:2k"


def test_switches_default_to_the_maximum_wait() -> None:
    assert fields("--switches=1")["Switches"] == "1@00:05:00"
    assert fields("--switches=2@10:00")["Switches"] == "2@00:05:00"
    assert fields("--switches=2@1:00")["Switches"] == "2@00:01:00"


def test_a_deadline_without_limits_gets_a_one_minute_time_min() -> None:
    assert fields("--deadline=now+1day")["TimeMin"] == "00:01:00"
    assert fields("--deadline=now+1day", "-t", "60")["TimeMin"] == "N/A"


def test_dependency_on_a_whole_array_shows_a_star() -> None:
    ident = JobIdentity(job_id=77, user="alice", account="a", array_targets=frozenset({12}))
    assert fields("-d", "afterok:12", ident=ident)["Dependency"] == "afterok:12_*(unfulfilled)"


def test_array_output_names_use_the_array_id() -> None:
    ident = JobIdentity(job_id=77, user="alice", account="a", array_job_id=77)
    got = fields("-a", "1-3%2", ident=ident)
    assert (got["ArrayTaskId"], got["ArrayTaskThrottle"]) == ("1-3%2", "2")
    assert got["StdOut"] == "/w/slurm-77_4294967294.out"


@given(st.integers(0, 2**40))
def test_memory_prints_in_the_largest_exact_unit(mb: int) -> None:
    text = format_mem(mb)
    assert text == "0" or text[-1] in "MGTPE"
