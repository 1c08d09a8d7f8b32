"""srun inside a job takes any argv and any batch environment without crashing: every
option of srun's table with odd values, local and in the pods, answers with srun's own
words (SrunExit) or a step; the step's resource request is then built without error."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from containers.srun_claim import JOB_GPUS_VAR, job_share, step_ask
from containers.srun_layout import SrunExit, allocation_from_env, plan_step
from containers.srun_options import SRUN_OPTIONS
from k8s_bridge import pod_launch_plan as lp

_VALUES = st.sampled_from(
    ["", "0", "1", "2", "-1", "gpu:2", "gpu:a100:1", "none", "a100:3", "node01", "x", "3G", "1-2"]
) | st.text(max_size=8)
_LONG = st.sampled_from([name for name, _, _ in SRUN_OPTIONS]).flatmap(
    lambda name: st.one_of(st.just(f"--{name}"), _VALUES.map(lambda v: f"--{name}={v}"))
)
_SHORT = st.sampled_from([short for _, short, _ in SRUN_OPTIONS if short]).map(lambda s: f"-{s}")
_ARGV = st.lists(st.one_of(_LONG, _SHORT, _VALUES), max_size=6).map(lambda a: [*a, "true"])
_ENV = st.fixed_dictionaries(
    {
        "SLURM_JOB_ID": st.just("7"),
        "SLURM_JOB_NODELIST": st.sampled_from(["node01", "node[01-02]", "", "node[01-"]),
        "SLURM_JOB_CPUS_PER_NODE": st.sampled_from(["2", "2(x2)", "x", ""]),
        "SLURM_TASKS_PER_NODE": st.sampled_from(["1", "1(x2)", "", "0"]),
    },
    optional={
        "SLURM_NNODES": st.sampled_from(["1", "2", "0", "x"]),
        "SLURM_JOB_GPUS": st.sampled_from(["0,1", ""]),
        "SLURM_GPUS_PER_TASK": _VALUES,
        "SLURM_GPUS": _VALUES,
        "SLURM_MEM_PER_CPU": st.sampled_from(["100", "x", "0"]),
        JOB_GPUS_VAR: st.sampled_from(
            ['{"nodes":{"node01":[0,1]},"per_node":2}', "{", '{"nodes":[]}', "null"]
        ),
    },
)


def _local(argv: list[str], env: dict[str, str]) -> tuple[str, ...]:
    """srun's refusal lines, or () once the step and its resource request are built."""
    try:
        step = plan_step(argv, env)
    except SrunExit as exc:
        return () if exc.stdout else exc.lines  # (--help, --usage, --version: stdout)
    alloc = allocation_from_env(env)
    job_share(alloc.nodes, alloc.cpus_per_node, env)
    step_ask(step.tasks_per_node, step.cpus_per_task, step.options, (), env)
    return ()


def _pods(argv: list[str], env: dict[str, str]) -> tuple[str, ...] | None:
    """The pods' srun: its refusal lines, or None for a step."""
    try:
        opts, _ = lp.parse(argv, env)
        lp.plan(opts, env)
    except lp.SrunExit as exc:
        return exc.lines
    return None


@settings(max_examples=300, deadline=None)
@given(argv=_ARGV, env=_ENV)
def test_srun_takes_any_argv_and_environment(argv: list[str], env: dict[str, str]) -> None:
    lines = _local(argv, env)
    assert all(line.startswith(("srun: ", "Try ")) for line in lines)
    assert _pods(argv, env) != ()
