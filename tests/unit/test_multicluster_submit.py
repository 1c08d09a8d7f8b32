"""The submit edge's cheap look for `-M/--clusters` never misses a form sbatch's own passes
accept (command line, abbreviations, SBATCH_CLUSTERS, #SBATCH lines), and skips the second
parse for submissions that cannot name clusters."""

from __future__ import annotations

import time

import pytest

from gateway.api.submit_clusters import _may_name_clusters
from gateway.control.submit import Caller, SbatchCall, parse_call

pytestmark = pytest.mark.federation

CALLER = Caller(uid=0, gid=0, user="root", group="root", operator=True)
SCRIPT = "#!/bin/bash\n{directive}\nsrun hostname\n"


def _call(argv: list[str], env: dict[str, str] | None = None, directive: str = "") -> SbatchCall:
    script = SCRIPT.format(directive=directive)
    return SbatchCall(
        argv=["sbatch", *argv, "job.sh"],
        env=env or {},
        cwd="/tmp",
        script=script,
        script_path="/tmp/job.sh",
        script_operand="job.sh",
    )


NAMING = [
    _call(["-M", "burst"]),
    _call(["-Mburst"]),
    _call(["-HMburst"]),
    _call(["--clusters=burst"]),
    _call(["--cluster", "burst"]),
    _call(["--cluster=burst"]),
    _call([], {"SBATCH_CLUSTERS": "burst"}),
    _call([], directive="#SBATCH -M burst"),
    _call([], directive="#SBATCH --clusters=burst"),
    _call([], directive="#SBATCH -N 1 -M burst"),
]
PLAIN = [
    _call(["-N", "2", "-p", "real"]),
    _call(["--mem=1G"], {"SBATCH_PARTITION": "real"}),
    _call([], directive="#SBATCH --time=10"),
]


@pytest.mark.parametrize("call", NAMING, ids=lambda c: " ".join(c.argv) + str(dict(c.env)))
def test_every_form_the_parser_accepts_is_looked_at(call: SbatchCall) -> None:
    request = parse_call(call, CALLER, time.time(), 1001)
    assert request.spec.clusters == ("burst",)
    assert _may_name_clusters(call)


@pytest.mark.parametrize("call", PLAIN, ids=lambda c: " ".join(c.argv))
def test_submissions_without_clusters_are_not_parsed_twice(call: SbatchCall) -> None:
    assert parse_call(call, CALLER, time.time(), 1001).spec.clusters == ()
    assert not _may_name_clusters(call)
