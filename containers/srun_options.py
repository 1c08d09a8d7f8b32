"""srun's options as Slurm 22.05's srun takes them: every entry of `common_options[]` with a
srun setter (src/common/slurm_opt.c), with its short letter and argument, and srun's
env_vars table. Both the local srun (containers/srun_layout.py) and the pods' srun
(k8s_bridge/pod_launch_plan.py) parse with this table, so an option real srun accepts is
accepted, abbreviations resolve as getopt_long resolves them against the whole table, and
what a step inside a job has no use for is taken and ignored, as slurmctld ignores the
allocation options of a step (`--begin`, `--mail-type`...). Standard library only: shipped
to job pods beside the launcher.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

__all__ = [
    "ALIASES",
    "SRUN_ENV_OPTIONS",
    "SRUN_OPTIONS",
    "VERSION_TEXT",
    "allocation_notes",
    "options_verdict",
    "relative_refusal",
    "srun_env_options",
    "step_distribution",
    "umask_text",
]

_N, _R, _O = "none", "required", "optional"

# (long name, short letter, argument)
SRUN_OPTIONS: tuple[tuple[str, str | None, str], ...] = (
    ("accel-bind", None, _R),
    ("account", "A", _R),
    ("acctg-freq", None, _R),
    ("bb", None, _R),
    ("bbf", None, _R),
    ("bcast", None, _O),
    ("bcast-exclude", None, _R),
    ("begin", "b", _R),
    ("chdir", "D", _R),
    ("cluster", None, _R),
    ("cluster-constraint", None, _R),
    ("clusters", "M", _R),
    ("comment", None, _R),
    ("compress", None, _O),
    ("constraint", "C", _R),
    ("container", None, _R),
    ("context", None, _R),
    ("contiguous", None, _N),
    ("core-spec", "S", _R),
    ("cores-per-socket", None, _R),
    ("cpu-bind", None, _R),
    ("cpu-freq", None, _R),
    ("cpu_bind", None, _R),
    ("cpus-per-gpu", None, _R),
    ("cpus-per-task", "c", _R),
    ("deadline", None, _R),
    ("debugger-test", None, _N),
    ("delay-boot", None, _R),
    ("dependency", "d", _R),
    ("disable-status", "X", _N),
    ("distribution", "m", _R),
    ("epilog", None, _R),
    ("error", "e", _R),
    ("exact", None, _N),
    ("exclude", "x", _R),
    ("exclusive", None, _O),
    ("export", None, _R),
    ("extra-node-info", "B", _R),
    ("gid", None, _R),
    ("gpu-bind", None, _R),
    ("gpu-freq", None, _R),
    ("gpus", "G", _R),
    ("gpus-per-node", None, _R),
    ("gpus-per-socket", None, _R),
    ("gpus-per-task", None, _R),
    ("gres", None, _R),
    ("gres-flags", None, _R),
    ("help", "h", _N),
    ("het-group", None, _R),
    ("hint", None, _R),
    ("hold", "H", _N),
    ("immediate", "I", _O),
    ("input", "i", _R),
    ("interactive", None, _N),
    ("job-name", "J", _R),
    ("jobid", None, _R),
    ("kill-on-bad-exit", "K", _O),
    ("label", "l", _N),
    ("licenses", "L", _R),
    ("mail-type", None, _R),
    ("mail-user", None, _R),
    ("mcs-label", None, _R),
    ("mem", None, _R),
    ("mem-bind", None, _R),
    ("mem-per-cpu", None, _R),
    ("mem-per-gpu", None, _R),
    ("mincpus", None, _R),
    ("mpi", None, _R),
    ("msg-timeout", None, _R),
    ("multi-prog", None, _N),
    ("network", None, _R),
    ("nice", None, _O),
    ("no-allocate", "Z", _N),
    ("no-kill", "k", _O),
    ("nodefile", "F", _R),
    ("nodelist", "w", _R),
    ("nodes", "N", _R),
    ("ntasks", "n", _R),
    ("ntasks-per-core", None, _R),
    ("ntasks-per-gpu", None, _R),
    ("ntasks-per-node", None, _R),
    ("ntasks-per-socket", None, _R),
    ("ntasks-per-tres", None, _R),
    ("open-mode", None, _R),
    ("output", "o", _R),
    ("overcommit", "O", _N),
    ("overlap", None, _O),
    ("oversubscribe", "s", _N),
    ("pack-group", None, _R),
    ("partition", "p", _R),
    ("power", None, _R),
    ("prefer", None, _R),
    ("preserve-env", "E", _N),
    ("priority", None, _R),
    ("profile", None, _R),
    ("prolog", None, _R),
    ("propagate", None, _O),
    ("pty", None, _N),
    ("qos", "q", _R),
    ("quiet", "Q", _N),
    ("quit-on-interrupt", None, _N),
    ("reboot", None, _N),
    ("relative", "r", _R),
    ("reservation", None, _R),
    ("resv-ports", None, _O),
    ("send-libs", None, _O),
    ("signal", None, _R),
    ("slurmd-debug", None, _R),
    ("sockets-per-node", None, _R),
    ("spread-job", None, _N),
    ("switches", None, _R),
    ("task-epilog", None, _R),
    ("task-prolog", None, _R),
    ("tasks-per-node", None, _R),
    ("test-only", None, _N),
    ("thread-spec", None, _R),
    ("threads", "T", _R),
    ("threads-per-core", None, _R),
    ("time", "t", _R),
    ("time-min", None, _R),
    ("tmp", None, _R),
    ("uid", None, _R),
    ("unbuffered", "u", _N),
    ("usage", None, _N),
    ("use-min-nodes", None, _N),
    ("verbose", "v", _N),
    ("version", "V", _N),
    ("wait", "W", _R),
    ("wckey", None, _R),
    ("whole", None, _N),
    ("x11", None, _O),
)
# spellings that are one option to getopt_long (the same val): the name the parser gives
ALIASES = {"cpu_bind": "cpu-bind", "tasks-per-node": "ntasks-per-node", "pack-group": "het-group"}

# srun 22.05's env_vars that set an option a step inside a job uses (local srun and the
# pods' alike); SLURM_KILL_BAD_EXIT is read with -K (srun_io.kill_on_bad_exit); SLURM_NTASKS,
# SLURM_JOB_NUM_NODES and the like describe the allocation (allocation_from_env);
# SLURM_CPUS_PER_TASK is not read by 22.05's srun
SRUN_ENV_OPTIONS = (
    ("SRUN_CPUS_PER_TASK", "cpus-per-task"),
    ("SLURM_CPU_BIND", "cpu-bind"),
    ("SLURM_LABELIO", "label"),
    ("SLURM_UNBUFFEREDIO", "unbuffered"),
    ("SLURM_STDOUTMODE", "output"),
    ("SLURM_STDERRMODE", "error"),
    ("SLURM_STDINMODE", "input"),
    ("SLURM_WAIT", "wait"),
    ("SLURM_EXACT", "exact"),
    ("SLURM_OVERLAP", "overlap"),
    ("SLURM_OVERCOMMIT", "overcommit"),
    ("SLURM_GPUS", "gpus"),
    ("SLURM_GPUS_PER_NODE", "gpus-per-node"),
    ("SLURM_GPUS_PER_TASK", "gpus-per-task"),
    ("SLURM_GRES", "gres"),
)
_SRUN_ENV_FLAGS = frozenset({"label", "unbuffered", "exact", "overlap", "overcommit"})


def srun_env_options(env: Mapping[str, str]) -> dict[str, str | None]:
    """The options srun takes from its environment before its command line (its env_vars
    table), for those a step uses and the batch environment does not already describe."""
    options: dict[str, str | None] = {}
    for var, option in SRUN_ENV_OPTIONS:
        if var in env:
            options[option] = None if option in _SRUN_ENV_FLAGS else env[var]
    return options


# what srun prints for --version (upstream's name; Debian's build says slurm-wlm);
# gateway/compat/options_help.py's sbatch says the same (tests/unit/test_srun_options.py)
VERSION_TEXT = "slurm-wlm 22.05.8"


def _spelled(name: str, short: str | None, arg: str) -> str:
    value = {"none": "", "required": "=value", "optional": "[=value]"}[arg]
    head = f"-{short}, " if short else "    "
    return f"  {head}--{name}{value}"


def _early_answer(options: Mapping[str, str | None]) -> str | None:
    """What srun prints on stdout and exits 0 with, before anything else: --help, --usage
    and --version (Caldera's own text for the first two, generated from the table)."""
    if "help" in options:
        spelled = [_spelled(n, s, a) for n, s, a in SRUN_OPTIONS if n not in ALIASES]
        return "\n".join(["Usage: srun [OPTIONS(0)...] executable(0) [args(0)...]", *spelled])
    if "usage" in options:
        return "Usage: srun [options] executable [args...]   (srun --help lists the options)"
    if "version" in options:
        return VERSION_TEXT
    return None


def options_verdict(
    options: Mapping[str, str | None], uid: str
) -> tuple[list[str], int, bool] | None:
    """srun's answer to its options alone, in its order, before it looks at the job: the
    lines, the exit status, and whether they go to stdout (--help, --usage, --version);
    --uid/--gid for a user other than root (255); options that exclude each other (1)."""
    answer = _early_answer(options)
    if answer is not None:
        return [answer], 0, True
    for name in ("uid", "gid"):
        if name in options and uid != "0":
            return [f"srun: error: --{name} only permitted by root user"], 255, False
    if "exclusive" in options and "overlap" in options:
        return ["srun: error: --exclusive and --overlap are mutually exclusive"], 1, False
    if "exact" in options and "whole" in options:
        return ["srun: error: --exact and --whole are mutually exclusive."], 1, False
    return None


def allocation_notes(options: Mapping[str, str | None]) -> tuple[list[str], list[str], bool]:
    """What srun says of allocation options inside a job, as the test cluster said it:
    lines before the layout's warnings, lines after them, and whether srun then exits 1
    (`-Z` without `-w`, `-r` with `-Z`, `-w` or `-x`; `--het-group` in a job that is not
    heterogeneous)."""
    first: list[str] = []
    then: list[str] = []
    if "no-allocate" in options and not options.get("nodelist"):
        first.append("srun: error: must specify a node list with -Z, --no-allocate.")
    if "no-allocate" in options and "relative" in options:
        first.append("srun: error: do not specify -r,--relative with -Z,--no-allocate.")
    if "relative" in options and (options.get("nodelist") or options.get("exclude")):
        text = "-r,--relative not allowed with -w,--nodelist or -x,--exclude."
        first.append(f"srun: error: {text}")
    if "begin" in options:
        then.append("srun: error: --begin is ignored because nodes are already allocated.")
    if "het-group" in options:
        text = "No directives to start application on any available hetjob components"
        then.append(f"srun: error: {text}")
    return first, then, bool(first) or "het-group" in options


def relative_refusal(relative: int, nodes: int, allocated: int, nodes_set: bool) -> str | None:
    """srun's `_validate_relative`: the step's first node (`-r`) plus its node count must
    fit in the allocation; the count is `-N`'s (`nodes_set`) or the job's own."""
    if relative + nodes <= allocated:
        return None
    source = "--nodes" if nodes_set else "SLURM_JOB_NUM_NODES"
    return (
        f"srun: error: --relative and {source} option incompatible with count of allocated "
        f"nodes ({relative}+{nodes}>{allocated})"
    )


def step_distribution(asked: str | None, ntasks: int, nnodes: int) -> str:
    """A step's SLURM_DISTRIBUTION: srun's -m as given (lower case; `plane=N` is `plane`),
    else what srun chooses (launch.c): cyclic for no more tasks than nodes, block otherwise
    (the test cluster: `srun -n1`, `-n2` over two nodes cyclic; `-n4`, `-N1 -n2` block)."""
    text = (asked or "").lower()
    first = text.split(":")[0]
    if first.startswith("plane"):
        return "plane"
    if first in ("block", "cyclic", "arbitrary"):
        return text
    return "cyclic" if ntasks <= nnodes else "block"


def umask_text() -> str:
    """srun's SLURM_UMASK (opt.c, when the caller has none): its umask, `0022`."""
    mask = os.umask(0)
    os.umask(mask)
    return f"{mask & 0o777:04o}"
