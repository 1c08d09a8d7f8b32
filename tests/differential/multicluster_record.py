"""Record what real Slurm 22.05 prints for its multi-cluster command forms (``-M/--clusters``).

Needs both test clusters (``caldera`` and ``burst``, tests/support/slurm_burst.py) and root.
Re-record with::

    python -m tests.differential.multicluster_record   # writes tests/data/multicluster/

Each case is run as root and as ``tester`` (uid 1001); stdout, stderr and the exit code are
kept verbatim in ``slurm-22.05.json`` with the job ids the run submitted, so that a reader can
see which id belongs to which cluster. Jobs are submitted held (``--hold``) and cancelled by
id at the end (``scancel -M <cluster> <id>``): nothing else on the shared clusters is touched.
The live differential test (test_multicluster_vs_slurm.py) runs the same table.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.support.slurm_burst import SlurmClusters, ensure_burst_up, run_on
from tests.support.slurm_stack import SlurmStack

__all__ = ["CASES", "DATA", "Case", "record_all"]

DATA = Path(__file__).resolve().parents[1] / "data" / "multicluster" / "slurm-22.05.json"
USERS = ("root", "tester")
WRAP = ["--wrap", "sleep 30"]


@dataclass(frozen=True)
class Case:
    """One command line; ``{home}``/``{burst}`` stand for a held job of the user there."""

    name: str
    argv: tuple[str, ...]


SUBMITS: tuple[Case, ...] = (
    Case("sbatch_M_burst", ("sbatch", "-M", "burst", "--hold", *WRAP)),
    Case("sbatch_M_home_burst", ("sbatch", "-M", "caldera,burst", "--hold", *WRAP)),
    Case("sbatch_M_burst_home", ("sbatch", "-M", "burst,caldera", "--hold", *WRAP)),
    Case("sbatch_M_all", ("sbatch", "-M", "all", "--hold", *WRAP)),
    Case("sbatch_M_burst_parsable", ("sbatch", "-M", "burst", "--parsable", "--hold", *WRAP)),
    Case(
        "sbatch_M_two_parsable",
        ("sbatch", "--clusters=caldera,burst", "--parsable", "--hold", *WRAP),
    ),
    Case("sbatch_M_nosuch", ("sbatch", "-M", "nosuch", "--hold", *WRAP)),
    Case("sbatch_M_nosuch_burst", ("sbatch", "-M", "nosuch,burst", "--hold", *WRAP)),
    Case(
        "sbatch_M_h100_only_burst",
        ("sbatch", "-M", "caldera,burst", "--gres=gpu:h100:1", "--hold", *WRAP),
    ),
    Case("sbatch_M_burst_a100", ("sbatch", "-M", "burst", "--gres=gpu:a100:1", *WRAP)),
    Case("sbatch_M_burst_test_only", ("sbatch", "-M", "burst", "--test-only", *WRAP)),
    Case("sbatch_M_nosuch_test_only", ("sbatch", "-M", "nosuch", "--test-only", *WRAP)),
)
QUERIES: tuple[Case, ...] = (
    Case("squeue_M_all", ("squeue", "-M", "all", "-j", "{burst},{home}")),
    Case("squeue_M_two_reversed", ("squeue", "-M", "caldera,burst", "-j", "{burst},{home}")),
    Case("squeue_M_all_noheader", ("squeue", "-M", "all", "-h", "-j", "{burst},{home}")),
    Case("squeue_M_all_o", ("squeue", "-M", "all", "-o", "%i %P %j", "-j", "{burst},{home}")),
    Case(
        "squeue_M_burst_O_cluster",
        ("squeue", "-M", "burst", "-O", "cluster,jobid,partition,state,reason", "-j", "{burst}"),
    ),
    Case("squeue_M_burst_noheader", ("squeue", "-M", "burst", "-h", "-j", "{burst}")),
    Case("squeue_M_nosuch", ("squeue", "-M", "nosuch")),
    Case("squeue_M_all_long", ("squeue", "-M", "all", "-l", "-j", "{burst},{home}")),
    Case("squeue_M_all_long_noheader", ("squeue", "-M", "all", "-l", "-h", "-j", "{burst},{home}")),
    Case("squeue_M_empty", ("squeue", "-M", "")),
    Case("squeue_M_nosuch_burst", ("squeue", "-M", "nosuch,burst", "-j", "{burst}")),
    Case("sinfo_M_all_real", ("sinfo", "-M", "all", "-p", "real")),
    # 22.05's sinfo -M all -h crashes (SIGSEGV, rc 139) after printing part of its output
    Case("sinfo_M_all_noheader", ("sinfo", "-M", "all", "-h", "-p", "real")),
    Case("sinfo_M_all_N_noheader", ("sinfo", "-M", "all", "-N", "-h", "-p", "real")),
    Case("sinfo_M_upper", ("sinfo", "-M", "BURST", "-p", "real")),
    Case("sinfo_M_two_unknown", ("sinfo", "-M", "nosuch,bogus")),
    Case("sinfo_M_burst", ("sinfo", "-M", "burst")),
    Case("sinfo_M_nosuch", ("sinfo", "-M", "nosuch")),
    Case(
        "sacct_M_burst",
        ("sacct", "-M", "burst", "-X", "-j", "{burst}", "-o", "jobid,cluster,partition,state"),
    ),
    Case(
        "sacct_M_all",
        ("sacct", "-M", "all", "-X", "-j", "{burst},{home}", "-o", "jobid,cluster,state"),
    ),
    Case("sacct_L", ("sacct", "-L", "-X", "-j", "{burst},{home}", "-o", "jobid,cluster,state")),
    Case("sacct_M_nosuch", ("sacct", "-M", "nosuch", "-X", "-j", "{burst}")),
    Case("scontrol_M_burst_show_job", ("scontrol", "-M", "burst", "show", "job", "{burst}")),
    Case("scontrol_M_nosuch", ("scontrol", "-M", "nosuch", "show", "job", "{burst}")),
    Case("scancel_M_nosuch", ("scancel", "-M", "nosuch", "{burst}")),
    Case("scancel_M_burst_home_job", ("scancel", "-M", "burst", "{home}")),
    Case(
        "squeue_M_home_after_other_cancel",
        ("squeue", "-M", "caldera", "-j", "{home}", "-o", "%i %T"),
    ),
    Case("scancel_M_burst", ("scancel", "-M", "burst", "{burst}")),
    Case(
        "squeue_M_burst_after_cancel",
        ("squeue", "-M", "burst", "-t", "all", "-j", "{burst}", "-o", "%i %T"),
    ),
)
CASES = SUBMITS + QUERIES

_ON_CLUSTER = re.compile(r"Submitted batch job (\d+) on cluster (\S+)|^(\d+);(\S+)$", re.M)


def submitted(stdout: str) -> tuple[str, str] | None:
    """(job id, cluster) from ``Submitted batch job N on cluster X`` or ``N;X``."""
    m = _ON_CLUSTER.search(stdout)
    if m is None:
        return None
    return (m.group(1), m.group(2)) if m.group(1) else (m.group(3), m.group(4))


def expand(case: Case, jobs: Mapping[str, str]) -> list[str]:
    """The case's argv with ``{home}``/``{burst}`` replaced by the user's job ids."""
    return [a.format(**jobs) for a in case.argv]


def record_user(clusters: SlurmClusters, user: str) -> dict[str, dict[str, object]]:
    """Run every case as ``user``; cancel the jobs it made."""
    home = clusters.home
    out: dict[str, dict[str, object]] = {}
    made: list[tuple[str, str]] = []
    for case in SUBMITS:
        proc = run_on(home, list(case.argv), user=user)
        out[case.name] = {
            "argv": list(case.argv),
            "stdout": proc.stdout,
            "stderr": proc.stderr,
            "rc": proc.returncode,
        }
        got = submitted(proc.stdout)
        if got is not None:
            made.append(got)
    jobs = {
        "home": _own(home, user, "caldera"),
        "burst": _own(home, user, "burst"),
    }
    try:
        for case in QUERIES:
            argv = expand(case, jobs)
            proc = run_on(home, argv, user=user)
            out[case.name] = {
                "argv": argv,
                "stdout": proc.stdout,
                "stderr": proc.stderr,
                "rc": proc.returncode,
            }
    finally:
        for job_id, cluster in made:
            run_on(home, ["scancel", "-M", cluster, job_id])
        for cluster in ("caldera", "burst"):
            run_on(
                home, ["scancel", "-M", cluster, jobs["home" if cluster == "caldera" else "burst"]]
            )
    out["_jobs"] = {"submitted": [list(m) for m in made], "queried": jobs}
    return out


def _own(home: SlurmStack, user: str, cluster: str) -> str:
    """A fresh held job of ``user`` on ``cluster`` for the queries."""
    proc = run_on(home, ["sbatch", "-M", cluster, "--parsable", "--hold", *WRAP], user=user)
    got = submitted(proc.stdout)
    if got is None:
        raise RuntimeError(f"sbatch -M {cluster} as {user} failed: {proc.stderr.strip()}")
    return got[0]


def record_all() -> dict[str, object]:
    """Every case as root and as tester."""
    clusters = ensure_burst_up()
    return {"slurm": "22.05", "users": {u: record_user(clusters, u) for u in USERS}}


def main() -> int:
    data = record_all()
    DATA.parent.mkdir(parents=True, exist_ok=True)
    DATA.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    print(f"wrote {DATA}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
