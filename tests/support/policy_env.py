"""Policy test helpers: the accounting objects of testenv/slurm/accounting.sh built through
Caldera's sacctmgr, and the recorded transcripts of the real sacctmgr (tests/data)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path

from gateway.policy.model import PolicyState, initial_state
from gateway.policy.sacctmgr_apply import apply_change
from gateway.policy.sacctmgr_parse import Verb, parse_argv
from gateway.policy.sacctmgr_show import show
from gateway.policy.values import SacctmgrError

DATA = Path(__file__).resolve().parents[1] / "data" / "slurm_policy"

QOS = [
    "debug", "standby", "shared", "regular", "flex", "preempt", "debug_preempt", "qos_gpu-t3",
    "qos_gpu-t4",
]  # fmt: skip
ACCOUNTS = [
    "caldera", "project_2001659", "project_465002178", "project_465000934", "xcore", "ntrain4",
    "m3562_g", "a-ccsc", "six@cpu", "six@gpu", "six@a100", "six@v100", "group@partition",
]  # fmt: skip
USERS = ["root", "tester", "tester2"]


@dataclass(frozen=True)
class Block:
    """One recorded invocation: argv, what it printed (stderr then stdout), exit status."""

    argv: list[str]
    text: str
    rc: int


def transcript(name: str) -> list[Block]:
    """A recorded transcript (`$ sacctmgr ARGS`, output, `[rc=N]`)."""
    blocks: list[Block] = []
    argv: list[str] | None = None
    lines: list[str] = []
    for line in (DATA / name).read_text().splitlines(keepends=True):
        if argv is None and line.startswith("$ "):
            argv = shlex.split(line[2:])[1:]
            lines = []
        elif argv is not None and line.startswith("[rc="):
            blocks.append(Block(argv, "".join(lines), int(line[4:-2])))
            argv = None
        else:
            lines.append(line)
    return blocks


def run(state: PolicyState, argv: list[str], operator: bool = True) -> tuple[PolicyState, str, int]:
    """(new state, stderr + stdout, exit status) of one Caldera sacctmgr invocation."""
    try:
        req = parse_argv(argv)
    except SacctmgrError as exc:
        return state, exc.message + "\n", 1
    if req.verb is Verb.SHOW:
        try:
            return state, show(state, req), 0
        except SacctmgrError as exc:
            return state, exc.message + "\n", 1
    out = apply_change(state, req, operator)
    return out.state or state, out.err + out.out, out.rc


def seeded() -> PolicyState:
    """The objects testenv/slurm/accounting.sh creates, made with Caldera's sacctmgr."""
    state = initial_state("caldera")
    for cmd in (
        f"-i add qos {','.join(QOS)}",
        f"-i add account {','.join(ACCOUNTS)} Organization=caldera",
        f"-i add user {','.join(USERS)} DefaultAccount=caldera",
        f"-i add user {','.join(USERS)} Account={','.join(ACCOUNTS)}",
        f"-i modify user where name={','.join(USERS)} set QOS=normal,{','.join(QOS)} "
        "DefaultQOS=normal",
    ):
        state, text, rc = run(state, shlex.split(cmd))
        assert rc == 0, text
    return state
