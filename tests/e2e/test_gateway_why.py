"""`caldera why JOBID` on a real gateway: squeue keeps Slurm's one-word reason, `why`
gives the shortfall behind it (any user may ask, as any user sees every reason)."""

from __future__ import annotations

import json
import time

from tests.support.gateway_env import Gateway


def test_why_names_the_short_resource_and_the_job_whose_end_makes_room(gateway: Gateway) -> None:
    gw = gateway
    cpus = int(gw.ok(["sinfo", "-h", "-o", "%c"]).split()[0])
    holders = [gw.sbatch("-c", "1", "-t", str(600 + i), "--wrap", "sleep 600") for i in range(cpus)]
    try:
        deadline = time.monotonic() + 60
        while len(gw.ok(["squeue", "-h", "-t", "R"]).splitlines()) < cpus:
            assert time.monotonic() < deadline, gw.ok(["squeue"])
            time.sleep(0.2)
        waiting = gw.sbatch("-c", str(cpus), "-t", "5", "--wrap", "true")
        deadline = time.monotonic() + 30
        while gw.ok(["squeue", "-h", "-j", str(waiting), "-o", "%r"]).strip() != "Resources":
            assert time.monotonic() < deadline, gw.ok(["squeue"])
            time.sleep(0.2)

        out = gw.ok(["caldera", "why", str(waiting)])
        lines = out.splitlines()
        assert lines[0] == f"Job {waiting} (wrap) PENDING Reason=Resources"
        assert f"wants 1 node, each with {cpus} cpus; time limit 5 min" in out
        assert "0 of 1 nodes have room now, 1 needed" in out
        assert f"0 cpus free ({cpus} short)" in out
        # every holder must end before the node has room: the last to end is named
        assert f"when job {holders[-1]} ends (its time limit)" in out
        # squeue keeps Slurm's word: %R in parentheses, as Slurm prints a pending job's
        assert gw.ok(["squeue", "-h", "-j", str(waiting), "-o", "%R"]).strip() == "(Resources)"

        # another user may ask too (the route behind the command, on the same socket)
        url = f"http://caldera/v1/jobs/{waiting}/why"
        other = gw.ok(["curl", "-sf", "--unix-socket", str(gw.socket), url], user="tester")
        assert json.loads(other)["lines"][:4] == lines[:4]  # the rest says "in N min"
    finally:
        gw.run(["scancel", *map(str, holders)])  # running jobs outlive `caldera down`

    bad = gw.run(["caldera", "why", "4000000"])
    assert bad.returncode == 1
    assert "Invalid job id specified" in bad.stderr
