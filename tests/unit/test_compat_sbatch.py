"""sbatch's passes: precedence, hetjob components, the first pass, verification, errors."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.compat.errors import CompatError
from gateway.compat.options import OPTIONS
from gateway.compat.optypes import EarlyExit, ParseContext
from gateway.compat.sbatch import SbatchRequest, parse_sbatch, render_diagnostics
from gateway.model.jobspec import JobSpec, jobspec_from_json, jobspec_to_json

CTX = ParseContext(cwd="/home/alice", now=1_800_000_000.0, max_array_size=1001)
PATH = "/home/alice/job.sh"


def parse(
    argv: list[str],
    script: str = "#!/bin/sh\ntrue\n",
    env: dict[str, str] | None = None,
    ctx: ParseContext = CTX,
) -> SbatchRequest:
    return parse_sbatch(["sbatch", *argv, PATH], script, env or {}, ctx)


def spec(
    argv: list[str], script: str = "#!/bin/sh\ntrue\n", env: dict[str, str] | None = None
) -> JobSpec:
    return parse(argv, script, env).spec


def script(*lines: str) -> str:
    return "#!/bin/sh\n" + "".join(f"#SBATCH {line}\n" for line in lines) + "true\n"


def failure(
    argv: list[str],
    text: str = "#!/bin/sh\ntrue\n",
    env: dict[str, str] | None = None,
    ctx: ParseContext = CTX,
) -> tuple[int, str]:
    with pytest.raises(CompatError) as info:
        parse(argv, text, env, ctx)
    return info.value.exit_code, info.value.render("sbatch")


# --- precedence -----------------------------------------------------------------------------


def test_command_line_beats_environment_beats_script() -> None:
    text = script("-t 5", "-J from-script", "--comment=script")
    env = {"SBATCH_TIMELIMIT": "6", "SBATCH_JOB_NAME": "from-env"}
    got = spec(["-t", "7"], text, env)
    assert (got.time_limit, got.name, got.comment) == (7, "from-env", "script")


def test_environment_flags_set_and_falsy_values_reset() -> None:
    assert spec([], script("--requeue"), {"SBATCH_NO_REQUEUE": "1"}).requeue is False
    assert spec([], script("--requeue"), {"SBATCH_REQUEUE": "no"}).requeue is None
    assert spec([], env={"SBATCH_EXCLUSIVE": ""}).sharing is not None


def test_switch_count_and_wait_come_from_two_variables() -> None:
    got = spec([], env={"SBATCH_REQ_SWITCH": "2", "SBATCH_WAIT4SWITCH": "10:00"})
    assert (got.switches, got.switches_wait_s) == (2, 600)


def test_default_name_is_the_script_file_name_or_wrap() -> None:
    assert spec([]).name == "job.sh"
    req = parse_sbatch(["sbatch", "--wrap", "hostname"], None, {}, CTX)
    assert req.spec.name == "wrap"
    assert req.script.startswith("#!/bin/sh\n")


def test_relative_paths_are_made_absolute_in_the_working_directory() -> None:
    got = spec(["-D", "sub", "-o", "out-%j", "-e", "/tmp/err"])
    assert (got.workdir, got.stdout, got.stderr, got.stdin) == (
        "/home/alice/sub",
        "/home/alice/sub/out-%j",
        "/tmp/err",
        "/dev/null",
    )


# --- derived sizes --------------------------------------------------------------------------


def test_tasks_follow_nodes_times_tasks_per_node() -> None:
    got = spec(["-N", "3", "--ntasks-per-node=2"])
    assert (got.nodes_min, got.nodes_max, got.ntasks) == (3, 3, 6)


def test_fewer_tasks_than_nodes_cuts_the_nodes_with_a_warning() -> None:
    req = parse(["-N", "4", "-n", "2"])
    assert (req.spec.nodes_min, req.spec.nodes_max) == (2, 2)
    assert render_diagnostics(req.warnings) == (
        "sbatch: Warning: can't run 2 processes on 4 nodes, setting nnodes to 2\n"
    )


def test_mincpus_is_at_least_cpus_per_task() -> None:
    assert spec(["--mincpus=1", "-c", "3"]).mincpus == 3


def test_gres_check_fills_in_implied_counts() -> None:
    got = spec(["--gpus=4", "--gpus-per-node=2"])
    assert (got.nodes_min, got.nodes_max) == (2, 2)
    assert spec(["--gpus=2", "--ntasks-per-gpu=2"]).ntasks == 4


def test_past_begin_is_dropped_and_future_kept() -> None:
    assert spec(["--begin=2020-01-01"]).begin is None
    assert spec(["--begin=now+1hour"]).begin == 1_800_003_600


# --- hetjob components ----------------------------------------------------------------------


def test_script_components_and_command_line_components_pair_up() -> None:
    text = script("-n 1", "hetjob", "-n 2")
    got = spec(["-t", "11", ":", "-t", "12"], text)
    assert [(c.ntasks, c.time_limit) for c in (got, *got.het)] == [(1, 11), (2, 12)]


def test_one_command_line_component_applies_to_every_script_component() -> None:
    got = spec(["-t", "17"], script("-n 1", "hetjob", "-n 2"))
    assert [c.time_limit for c in (got, *got.het)] == [17, 17]


def test_options_sbatch_does_not_reset_reach_the_first_component() -> None:
    got = spec(["-n", "1", ":", "-n", "2", "--mem=2G"])
    assert [c.mem_per_node_mb for c in (got, *got.het)] == [2048, 2048]
    got = spec(["-n", "1", ":", "-p", "gpu"])
    assert [c.partitions for c in (got, *got.het)] == [(), ("gpu",)]


def test_packjob_warns_once() -> None:
    req = parse([], script("-n 1", "packjob", "-n 2", "packjob", "-n 3"))
    assert len(req.spec.het) == 2
    assert [w.text for w in req.warnings].count(
        'Warning: the "packjob" component separator is being deprecated. '
        'Please, use "hetjob" instead.'
    ) == 1


# --- errors ---------------------------------------------------------------------------------


def test_a_bad_command_line_value_fails_before_the_script_is_read() -> None:
    assert failure(["--time=abc"], "echo no shebang\n") == (
        255,
        "sbatch: error: Invalid --time specification\n",
    )


def test_unknown_command_line_options_print_once() -> None:
    assert failure(["--bogus"]) == (
        255,
        "sbatch: unrecognized option '--bogus'\nTry \"sbatch --help\" for more information\n",
    )


def test_slurm_magic_warning_is_printed_before_a_later_error() -> None:
    code, text = failure([], "#!/bin/sh\n#SLURM -t 5\n#SBATCH --bogus\ntrue\n")
    assert code == 255
    assert text.splitlines()[0].startswith("sbatch: error: Change from #SLURM to #SBATCH")


def test_mutually_exclusive_memory_options() -> None:
    assert failure(["--mem=1G", "--mem-per-cpu=1G"]) == (
        1,
        "sbatch: fatal: --mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.\n",
    )
    env = {"SBATCH_MEM_PER_NODE": "1G", "SBATCH_MEM_PER_CPU": "1G"}
    assert failure([], env=env)[1].startswith("sbatch: fatal: SLURM_MEM_PER_CPU")
    # one on the command line wins over the other in the environment
    assert spec(["--mem=1G"], env={"SBATCH_MEM_PER_CPU": "2G"}).mem_per_cpu_mb is None


def test_uid_needs_root() -> None:
    ctx = ParseContext(cwd="/home/alice", uid=1000, user="alice")
    assert failure(["--uid=0"], ctx=ctx) == (
        255,
        "sbatch: error: --uid only permitted by root user\n",
    )


def test_controller_refusals_come_after_every_component_is_read() -> None:
    code, text = failure(["-a", "3-1"], script("-n 1", "hetjob", "--bogus"))
    assert code == 255
    assert "unrecognized option '--bogus'" in text


def test_invalid_array_is_refused_like_slurmctld() -> None:
    assert failure(["--array=3-1"]) == (
        1,
        "sbatch: error: Batch job submission failed: Invalid job array specification\n",
    )


def test_help_and_version_exit_early() -> None:
    with pytest.raises(EarlyExit) as info:
        parse(["--version"])
    assert info.value.stdout == "slurm-wlm 22.05.8\n"  # Debian's build, as the test cluster
    with pytest.raises(EarlyExit):
        parse(["--gres=help"])


def test_jobspec_json_round_trips() -> None:
    got = spec(["--gres=gpu:2k,craynetwork", "-d", "afterok:5+3", "-a", "1-5%2", "--signal=B:USR1"])
    assert jobspec_from_json(jobspec_to_json(got)) == got


# --- any input: a request, a CompatError or an early exit -----------------------------------

LONGS = sorted(o.long for o in OPTIONS if o.long)
SHORTS = sorted(o.short for o in OPTIONS if o.short)
VALUES = st.one_of(
    st.text(max_size=10),
    st.sampled_from(
        [
            "0",
            "1",
            "-1",
            "2-4",
            "1:30",
            "UNLIMITED",
            "gpu:2",
            "a100:1",
            "afterok:5",
            "now+1hour",
            "%j",
            "1-5%2",
            "4G",
            "none",
            "*",
            "user",
            ",",
            ":",
            "node[01-02]",
            "help",
        ]
    ),
)
WORD = st.one_of(
    st.builds(lambda n, v: f"--{n}={v}", st.sampled_from(LONGS), VALUES),
    st.builds(lambda n: f"--{n}", st.sampled_from(LONGS)),
    st.builds(lambda s, v: f"-{s}{v}", st.sampled_from(SHORTS), VALUES),
    st.sampled_from([":", "--", "-", "extra"]),
    VALUES,
)
ENV = st.dictionaries(
    st.sampled_from(sorted({name for o in OPTIONS for name in o.env})), VALUES, max_size=3
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.lists(WORD, max_size=8), st.lists(WORD, max_size=6), ENV)
def test_any_argv_env_and_directives_give_a_request_or_a_compat_error(
    argv: list[str], directives: list[str], env: dict[str, str]
) -> None:
    text = "#!/bin/sh\n" + "".join(f"#SBATCH {d}\n" for d in directives) + "true\n"
    try:
        req = parse_sbatch(["sbatch", *argv, PATH], text, env, CTX)
    except (CompatError, EarlyExit):
        return
    assert isinstance(req.spec, JobSpec)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(st.text(max_size=200))
def test_any_script_text_gives_a_request_or_a_compat_error(text: str) -> None:
    with contextlib.suppress(CompatError, EarlyExit):
        parse_sbatch(["sbatch", PATH], text, {}, CTX)
