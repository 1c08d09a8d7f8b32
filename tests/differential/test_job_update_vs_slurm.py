"""`scontrol update JobId=...` by a job's user, on Caldera's local site described by the test
cluster's slurm.conf and on the real Slurm 22.05 cluster: the same answers, exit codes and
resulting records.

What the test cluster does and Caldera did not: a user may raise a pending job's limit up
to its partition's MaxTime (10, then UNLIMITED, on a held `-t 5` job; refused once it
runs); `+N`/`-N` change the current limit (scontrol reads it first: JobId must come before,
a decrement larger than the limit is refused, `+1:00:00` on UNLIMITED wraps as uint32 to
59 minutes); an array that is still one record takes `+N`, and so does one of its tasks.
Caldera refused every raise, called `+N` an invalid value and stored `-3` as a negative
limit (`INVALID` in squeue). ReqNodeList=, ExcNodeList=, Requeue= and Features= were "not
supported"; the test cluster changes them on a pending job (an unknown node name or
feature refused, a feature some node of the cluster has taken; Requeue= other than 0 or
1 ignored), and so were WorkDir= (a relative path taken as given), StdOut=, MinMemoryNode=,
MinMemoryCPU= (pending jobs only), Licenses= (checked; refused to a running job's user)
and MailType=/MailUser= (running jobs too).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.support.gateway_env import running_gateway
from tests.support.slurm_stack import SlurmStack, slurm_env

pytestmark = pytest.mark.slurm

_SCRIPT = r"""
exec 2>&1
j=$(sbatch --parsable -p real --hold -t 5 -o /dev/null --wrap 'sleep 30')
limit() { squeue -h -j "$1" -o '%l'; }
scontrol update JobId=$j TimeLimit=10; echo "raise pending rc=$?"; limit $j
scontrol update JobId=$j TimeLimit=-3; echo "minus rc=$?"; limit $j
scontrol update JobId=$j TimeLimit=+4; echo "plus rc=$?"; limit $j
scontrol update JobId=$j TimeLimit=-30; echo "too much rc=$?"
scontrol update TimeLimit=+3 JobId=$j; echo "order rc=$?"
scontrol update JobId=$j TimeLimit=+x; echo "bad rc=$?"
scontrol update JobId=$j TimeLimit=11; echo "same rc=$?"
scontrol update JobId=$j TimeLimit=UNLIMITED; echo "unlimited rc=$?"; limit $j
scontrol update JobId=$j TimeLimit=+1:00:00; echo "wrap rc=$?"; limit $j
scontrol update JobId=99999 TimeLimit=+3; echo "no job rc=$?"
scontrol release $j
until [ "$(squeue -h -j $j -o %T)" = RUNNING ]; do sleep 0.3; done
scontrol update JobId=$j TimeLimit=+3; echo "raise running rc=$?"; limit $j
scontrol update JobId=$j TimeLimit=-3; echo "lower running rc=$?"; limit $j
scancel $j
while [ -n "$(squeue -h -j $j -o %T)" ]; do sleep 0.3; done
scontrol update JobId=$j TimeLimit=-3; echo "ended rc=$?"
a=$(sbatch --parsable -p real --hold -a 1-2 -t 5 -o /dev/null --wrap 'sleep 30')
scontrol update JobId=$a TimeLimit=+3; echo "array rc=$?"
scontrol update JobId=${a}_1 TimeLimit=+3; echo "task rc=$?"; limit ${a}_1
scancel $a
echo "ids $j $a"
"""


_FIELDS = r"""
exec 2>&1
j=$(sbatch --parsable -p real --hold -o /dev/null --wrap 'sleep 30')
show() {
  scontrol show job $j | grep -o -E "(ReqNodeList|ExcNodeList|Features|Requeue)=[^ ]*" \
    | tr '\n' ' '; echo
}
scontrol update JobId=$j ReqNodeList=nodeX; echo "unknown required rc=$?"
scontrol update JobId=$j ExcNodeList=nodeX; echo "unknown excluded rc=$?"
scontrol update JobId=$j ReqNodeList=node[01-02]; echo "required rc=$?"; show
scontrol update JobId=$j ReqNodeList=; echo "none required rc=$?"
scontrol update JobId=$j ExcNodeList=node01; echo "excluded rc=$?"; show
scontrol update JobId=$j Requeue=2; echo "requeue 2 rc=$?"; show
scontrol update JobId=$j Requeue=0; echo "requeue 0 rc=$?"; show
scontrol update JobId=$j Features=nosuch; echo "unknown feature rc=$?"
scontrol update JobId=$j Features=gpu; echo "feature rc=$?"; show
scontrol update JobId=$j Features=; echo "no feature rc=$?"; show
scontrol update JobId=$j ExcNodeList=; scontrol release $j
until [ "$(squeue -h -j $j -o %T)" = RUNNING ]; do sleep 0.3; done
scontrol update JobId=$j ExcNodeList=node04; echo "running excluded rc=$?"
scontrol update JobId=$j Requeue=1; echo "running requeue rc=$?"; show
scancel $j
echo "ids $j $j"
"""


_PENDING = r"""
exec 2>&1
j=$(sbatch --parsable -p real --hold -o /dev/null --wrap 'sleep 30')
show() {
  scontrol show job $j | grep -o -E \
    "(WorkDir|StdOut|StdErr|MinMemoryNode|MinMemoryCPU|Licenses|MailType|MailUser|TRES)=[^ ]*" \
    | tr '\n' ' '; echo
}
scontrol update JobId=$j WorkDir=relative; echo "relative workdir rc=$?"
scontrol update JobId=$j StdOut=/tmp/job-update.out; echo "stdout rc=$?"; show
scontrol update JobId=$j MinMemoryNode=300; echo "memory per node rc=$?"; show
scontrol update JobId=$j MinMemoryCPU=150; echo "memory per cpu rc=$?"; show
scontrol update JobId=$j MinMemoryNode=x; echo "bad memory rc=$?"
scontrol update JobId=$j Licenses=matlab:2; echo "licence rc=$?"; show
scontrol update JobId=$j Licenses=nosuch; echo "unknown licence rc=$?"
scontrol update JobId=$j MailType=END; echo "mail type rc=$?"; show
scontrol update JobId=$j MailType=BOGUS; echo "bad mail type rc=$?"
scontrol update JobId=$j MailUser=someone; echo "mail user rc=$?"; show
scontrol update JobId=$j WorkDir=$PWD MinMemoryNode=100 StdOut=/dev/null
scontrol release $j
until [ "$(squeue -h -j $j -o %T)" = RUNNING ]; do sleep 0.3; done
scontrol update JobId=$j WorkDir=/tmp; echo "running workdir rc=$?"
scontrol update JobId=$j MinMemoryNode=300; echo "running memory rc=$?"
scontrol update JobId=$j Licenses=matlab:1; echo "running licence rc=$?"
scontrol update JobId=$j StdOut=/tmp/x; echo "running stdout rc=$?"
scontrol update JobId=$j MailType=BEGIN; echo "running mail type rc=$?"; show
scancel $j
echo "ids $j $j"
"""

# TimeLimit=0 is a limit already over, not "none": a user may set it on a pending or a
# running job; each ends TIMEOUT (slurmctld: at its next periodic check, up to 30 s on;
# Caldera at once, so the running job is not queried after), its batch shell TERMed (0:15).
# The job ids: J the running one, A the released one.
_ZERO = r"""
exec 2>&1
j=$(sbatch --parsable -p real -t 5 -o /dev/null --wrap 'sleep 100')
a=$(sbatch --parsable -p real -t 5 --hold -o /dev/null --wrap 'sleep 100')
until [ "$(squeue -h -j $j -o %T)" = RUNNING ]; do sleep 0.3; done
scontrol update JobId=$j TimeLimit=0; echo "running rc=$?"
scontrol update JobId=$a TimeLimit=0; echo "pending rc=$?"; squeue -h -j $a -o '%T %l %L'
scontrol release $a
for k in $(seq 200); do [ -z "$(squeue -h -j $j,$a -o %T)" ] && break; sleep 0.3; done
sleep 3
sacct -j $j,$a -n -P -o jobid,state,exitcode,timelimit
scontrol show job $a | grep -o 'JobState=[A-Z]* Reason=[A-Za-z]*\|TimeLimit=[^ ]*'
echo "ids $j $a"
"""


def _named(out: str) -> str:
    """The job ids (last line) in Slurm's `for job ID` and in sacct rows replaced by J and A."""
    lines = out.splitlines()
    assert lines, out
    assert lines[-1].startswith("ids "), out
    job, array = lines[-1].split()[1:]
    text = "\n".join(lines[:-1])
    text = re.sub(rf"(?<=job ){array}\b", "A", re.sub(rf"(?<=job ){job}\b", "J", text))
    sacct_row = r"(?=[|.])"  # `ID|...` or `ID.batch|...`, never a limit such as `10:00`
    text = re.sub(rf"^{job}{sacct_row}", "J", text, flags=re.M)
    return re.sub(rf"^{array}{sacct_row}", "A", text, flags=re.M)


def _both(cluster: SlurmStack, script: str) -> tuple[str, str]:
    """`script` run by tester on the test cluster, then on a Caldera gateway given its
    slurm.conf: (ours, theirs), job ids named."""
    where = Path(tempfile.mkdtemp(prefix="job-update-", dir="/tmp"))
    where.chmod(0o777)
    conf = f"SLURM_CONF={slurm_env()['SLURM_CONF']}"
    real = subprocess.run(
        ["runuser", "-u", "tester", "--", "env", conf, "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=where,
    )
    config = f'[local]\nslurm_conf = "{cluster.slurm_conf}"\n'
    with running_gateway(config) as gw:
        done = gw.run(script, user="tester", cwd=where)
    shutil.rmtree(where, ignore_errors=True)
    return _named(done.stdout), _named(real.stdout)


# (scenario, what the cluster printed when the scenario ran as meant)
_SCENARIOS = {
    "time limits": (_SCRIPT, "raise pending rc=0\n10:00"),
    "nodes, features, requeue": (_FIELDS, "required rc=0\nRequeue=1 ReqNodeList=node[01-02]"),
    "files, memory, licences, mail": (_PENDING, "memory per node rc=0\nTRES=cpu=1,mem=300M"),
    "time limit zero": (_ZERO, "J|TIMEOUT|0:0|\nJ.batch|CANCELLED|0:15|"),
}


@pytest.mark.parametrize("name", list(_SCENARIOS))
def test_a_users_updates_are_answered_and_applied_as_slurm_does(
    cluster: SlurmStack, name: str
) -> None:
    script, sign = _SCENARIOS[name]
    ours, theirs = _both(cluster, script)
    assert sign in theirs, theirs
    assert ours == theirs, f"{ours}\n=== real Slurm:\n{theirs}"
