"""The project's own sbatch cases for the differential tests, and how each is run.

A case is a list of `#SBATCH` line bodies (one option group per line) or, for script
syntax, a whole script. Option cases run in four modes:

* `script`: the lines as `#SBATCH` directives;
* `cli`: the same words on the command line (tokenised as sbatch tokenises directives);
* `env`: every option that has an SBATCH_* variable in the environment, the rest in the
  script (only cases with at least one such option);
* `mixed`: precedence CLI > env > script: decoy directives plus the first half of the
  case in the script, decoy SBATCH_* variables, the second half on the command line.

`{job1}`..`{job3}` and `{arr}` stand for held jobs (and a held array) submitted first.
The tests in this module check the table itself (no cluster needed).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gateway.compat.getopt import ParsedArg, getopt_long
from gateway.compat.optypes import Arg
from gateway.compat.script import read_directives

__all__ = ["CASES", "MODES", "Case", "Mode", "build"]

MODES = ("script", "cli", "env", "mixed")
SHEBANG = "#!/bin/bash\n"
BODY = "srun hostname\n"

# Decoys for the mixed mode: the script's lose to the environment's, both lose to the CLI.
DECOY_LINES = (
    "-J decoy-script -t 3 --comment=decoy-script --nice=7",
    "-o decoy-script.out --mail-type=END --requeue --mem-per-cpu=300",
)
DECOY_ENV: Mapping[str, str] = {
    "SBATCH_JOB_NAME": "decoy-env",
    "SBATCH_TIMELIMIT": "5",
    "SBATCH_OUTPUT": "decoy-env-%j.out",
    "SBATCH_NO_REQUEUE": "1",
    "SBATCH_MEM_PER_CPU": "200",
    "SBATCH_ACCOUNT": "caldera",
}


@dataclass(frozen=True)
class Case:
    """One of the project's own cases."""

    id: str
    lines: tuple[str, ...] = ()  # `#SBATCH` bodies; "hetjob" separates components
    script: str | None = None  # a whole script (script syntax cases: script mode only)
    argv: tuple[str, ...] = ()  # extra sbatch options, in every mode
    env: Mapping[str, str] = field(default_factory=dict)
    script_args: tuple[str, ...] = ()

    def modes(self) -> tuple[str, ...]:
        """The modes this case runs in."""
        if self.script is not None:
            return ("script",)
        if any(line == "hetjob" for line in self.lines):
            return ("script", "cli")
        if not _env_items(self.lines):
            return ("script", "cli", "mixed")
        return MODES


@dataclass(frozen=True)
class Mode:
    """A case made concrete for one mode."""

    script: str
    argv: tuple[str, ...]
    env: Mapping[str, str]


def _fill(text: str, subs: Mapping[str, str]) -> str:
    return re.sub(r"\{(job\d|arr)\}", lambda m: subs.get(m.group(1), m.group(0)), text)


def _script(lines: Sequence[str]) -> str:
    return SHEBANG + "".join(f"#SBATCH {line}\n" for line in lines) + BODY


def _words(lines: Sequence[str]) -> list[str]:
    """The command-line words of directive lines, hetjob components joined by ':'."""
    text = _script(lines)
    words: list[str] = []
    component = 0
    while True:
        found = read_directives(text, "case.sh", component)
        if component:
            words.append(":")
        words += found.argv[1:]
        if not found.more_components:
            return words
        component += 1


def _items(lines: Sequence[str]) -> list[ParsedArg]:
    found = read_directives(_script(lines), "case.sh")
    items, _ = getopt_long(found.argv, found.origins)
    return [i for i in items if isinstance(i, ParsedArg)]


def _env_items(lines: Sequence[str]) -> list[ParsedArg]:
    return [i for i in _items(lines) if i.option.env or i.option.long == "switches"]


def _quote(word: str) -> str:
    if word and not re.search(r"[\s\"'\\#]", word):
        return word
    return '"' + word.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _as_line(item: ParsedArg) -> str:
    name = f"--{item.option.long}"
    if item.arg is None:
        return name
    return _quote(f"{name}={item.arg}")


def _as_env(item: ParsedArg) -> dict[str, str]:
    if item.option.long == "switches":
        count, at, wait = (item.arg or "").partition("@")
        return {"SBATCH_REQ_SWITCH": count} | ({"SBATCH_WAIT4SWITCH": wait} if at else {})
    value = item.arg if item.arg is not None else ""
    if item.option.arg is Arg.NONE:
        value = "1"
    return {item.option.env[0]: value}


def build(case: Case, mode: str, subs: Mapping[str, str]) -> Mode:
    """The script, argv and environment of `case` in `mode`."""
    lines = tuple(_fill(line, subs) for line in case.lines)
    argv = tuple(_fill(a, subs) for a in case.argv)
    env = {k: _fill(v, subs) for k, v in case.env.items()}
    if case.script is not None:
        return Mode(_fill(case.script, subs), argv, env)
    if mode == "script":
        return Mode(_script(lines), argv, env)
    if mode == "cli":
        return Mode(SHEBANG + BODY, (*argv, *_words(lines)), env)
    if mode == "env":
        kept: list[str] = []
        for item in _items(lines):
            if item.option.env or item.option.long == "switches":
                env |= _as_env(item)
            else:
                kept.append(_as_line(item))
        return Mode(_script(kept), argv, env)
    if mode == "mixed":
        half = len(lines) // 2
        script = _script((*DECOY_LINES, *lines[:half]))
        return Mode(script, (*argv, *_words(lines[half:])), dict(DECOY_ENV) | env)
    raise ValueError(f"unknown mode {mode!r}")


def C(id: str, *lines: str, **kw: object) -> Case:
    """An option case."""
    return Case(id, tuple(lines), **kw)  # type: ignore[arg-type]


def S(id: str, script: str, *argv: str, script_args: tuple[str, ...] = ()) -> Case:
    """A script syntax case."""
    return Case(id, script=script, argv=argv, script_args=script_args)


CASES: tuple[Case, ...] = (
    # --- time limits: every form, rounding, UNLIMITED and 0 -----------------------------
    C("time-minutes", "-t 30"),
    C("time-zero-is-unlimited", "--time=0"),
    C("time-90-minutes", "--time=90"),
    C("time-min-sec", "--time=1:30"),
    C("time-min-sec-rounds-up", "--time=0:59"),
    C("time-sec-only-rounds-up", "--time=0:1"),
    C("time-h-m-s", "--time=2:00:00"),
    C("time-h-m-s-rounds-up", "--time=1:00:01"),
    C("time-days-hours", "--time=1-0"),
    C("time-days-hours-minutes", "--time=1-2:30"),
    C("time-days-h-m-s", "--time=2-03:04:05"),
    C("time-unlimited", "--time=UNLIMITED"),
    C("time-infinite-lower", "--time=infinite"),
    C("time-minus-one", "--time=-1"),
    C("time-large", "--time=100000"),
    C("time-min-and-time", "-t 60 --time-min=30"),
    C("time-min-h-m-s", "--time=4:00:00", "--time-min=1:30:30"),
    C("time-min-days", "--time=3-0 --time-min=1-12"),
    C("time-last-wins", "-t 10", "-t 20"),
    C("time-leading-zeros", "--time=00:05:00"),
    # --- memory ------------------------------------------------------------------------
    C("mem-default-unit-mb", "--mem=1500"),
    C("mem-g", "--mem=4G"),
    C("mem-lower-g", "--mem=2g"),
    C("mem-m-suffix", "--mem=4096M"),
    C("mem-k-rounds-up", "--mem=1500K"),
    C("mem-kb", "--mem=2048KB"),
    C("mem-gb", "--mem=8GB"),
    C("mem-t", "--mem=1T"),
    C("mem-zero", "--mem=0"),
    C("mem-per-cpu-g", "--mem-per-cpu=2G"),
    C("mem-per-cpu-m", "--mem-per-cpu=500M", "-n 4"),
    C("mem-per-gpu", "--gpus=2 --mem-per-gpu=8G"),
    C("mem-last-of-same-wins", "--mem=1G", "--mem=3G"),
    C("tmp-disk", "--tmp=10G"),
    # --- nodes and tasks ---------------------------------------------------------------
    C("nodes-one", "-N 1"),
    C("nodes-two", "--nodes=2"),
    C("nodes-range", "-N 1-3"),
    C("nodes-range-ntasks-caps-max", "-N 2-4 -n 3"),
    C("nodes-more-than-tasks", "-N 4 -n 2"),
    C("nodes-leading-dash", "-N -3"),
    C("nodes-open-max", "-N 2-0"),
    C("nodes-tasks-per-node", "-N 3 --ntasks-per-node=2"),
    C("tasks-per-node-alias", "-N 2 --tasks-per-node=4"),
    C("ntasks-only", "-n 8"),
    C("ntasks-cpus", "-n 4 -c 2"),
    C("cpus-per-task", "--cpus-per-task=4"),
    C("ntasks-per-node-only", "--ntasks-per-node=4"),
    C("mincpus", "--mincpus=2"),
    C("mincpus-below-cpt", "--mincpus=1 -c 3"),
    C("extra-node-info", "-B 2:4:1"),
    C("sockets-cores-threads", "-N 1 --sockets-per-node=2 --cores-per-socket=2"),
    C("threads-per-core", "-N 2 --threads-per-core=1"),
    C("ntasks-per-core", "-n 2 --ntasks-per-core=1"),
    C("ntasks-per-socket", "-n 2 --ntasks-per-socket=1"),
    C("hint-nomultithread", "--hint=nomultithread"),
    C("hint-compute-bound-nodes", "-N 2 --hint=compute_bound"),
    C("overcommit", "-O -n 4"),
    # --- gres and gpus -----------------------------------------------------------------
    C("gres-gpu-count", "--gres=gpu:2"),
    C("gres-gpu-type-count", "--gres=gpu:a100:2"),
    C("gres-gpu-no-count", "--gres=gpu"),
    C("gres-gpu-type-only", "--gres=gpu:v100"),
    C("gres-two-kinds", "--gres=gpu:1,craynetwork:2"),
    C("gres-zero-dropped", "--gres=gpu:0"),
    C("gres-none", "--gres=none"),
    C("gpus-count", "--gpus=2"),
    C("gpus-type", "-G a100:3"),
    C("gpus-per-node", "--gpus-per-node=4"),
    C("gpus-per-node-type", "-N 2 --gpus-per-node=v100:2"),
    C("gpus-per-task", "-n 2 --gpus-per-task=1"),
    C("gpus-per-socket", "--gpus-per-socket=1 --sockets-per-node=2"),
    C("cpus-per-gpu", "--gpus-per-node=2 --cpus-per-gpu=4"),
    C("gpus-and-gres", "--gpus-per-node=2 --gres=craynetwork:1"),
    C("ntasks-per-gpu", "--gpus=2 --ntasks-per-gpu=2"),
    C("ntasks-per-gpu-from-tasks", "--ntasks-per-gpu=2 -n 4"),
    C("gres-count-suffix", "--gres=gpu:2k"),
    C("gres-prefixed", "--gres=gres:gpu:1"),
    C("gres-negative-count-is-type", "--gres=gpu:-1"),
    C("gres-type-zero", "--gres=gpu:a100:0"),
    C("gres-names-only", "--gres=gpu,craynetwork"),
    C("gpus-type-only", "--gpus=a100"),
    C("gpus-zero", "--gpus=0"),
    C("gpus-two-types", "--gpus-per-node=a100:2,v100:1"),
    C("gpus-job-and-node-sets-nodes", "--gpus=4 --gpus-per-node=2"),
    C("gpus-job-and-task-sets-tasks", "--gpus=2 --gpus-per-task=1"),
    C("cpus-per-gpu-times-gpus-per-task", "--cpus-per-gpu=2 --gpus-per-task=2 -n 2"),
    C("gpus-per-task-with-nodes", "-N 2 --gpus-per-task=1"),
    C("gpus-range-of-nodes", "--gpus=4 -N 1-8"),
    C("gres-other-with-ntasks-per-gpu", "--gres=craynetwork:1 --ntasks-per-gpu=1 -n 2"),
    C("gpus-per-node-and-gres", "--gres=gpu:1 --gpus-per-node=2"),
    C(
        "gpus-per-socket-sets-sockets",
        "-N 1 --gpus-per-node=4 --gpus-per-socket=2 --sockets-per-node=2",
    ),
    C("gpus-per-node-per-task-tasks-per-node", "-N 2 -n 4 --gpus-per-node=4 --gpus-per-task=2"),
    C("mem-per-gpu-typed", "--gpus=a100:1 --mem-per-gpu=4G"),
    C("cpus-per-gpu-typed-gpus", "--cpus-per-gpu=3 --gpus=a100:2"),
    # --- arrays ------------------------------------------------------------------------
    C("array-range", "--array=0-9"),
    C("array-list", "-a 1,3,5"),
    C("array-step", "--array=0-20:5"),
    C("array-step-not-reaching-end", "--array=1-10:4"),
    C("array-throttle", "--array=1-10%2"),
    C("array-step-throttle", "--array=0-15:4%3"),
    C("array-single", "--array=5"),
    C("array-brackets", "--array=[1-5]"),
    C("array-ranges-list", "--array=1-3,7-9"),
    C("array-duplicates", "--array=1,1,2"),
    C("array-overlap", "--array=1-5,3-7"),
    C("array-long-list-truncates", "--array=" + ",".join(str(i) for i in range(0, 80, 3))),
    C("array-near-max", "--array=99990-100000"),
    C("array-big-step-form", "--array=0-1000:10"),
    C("array-mail-array-tasks", "--array=1-2 --mail-type=ARRAY_TASKS,END"),
    C("array-throttle-only", "--array=%5"),
    C("array-empty-is-no-array", "--array="),
    C("array-only-commas-is-no-array", "--array=,"),
    C("array-output-patterns", "--array=1-3", "-o arr-%A_%a.out -e arr-%A-%3a.err"),
    # --- dependencies ------------------------------------------------------------------
    C("dep-after", "--dependency=after:{job1}"),
    C("dep-afterany", "-d afterany:{job1}"),
    C("dep-afterok", "-d afterok:{job1}"),
    C("dep-afternotok", "-d afternotok:{job2}"),
    C("dep-aftercorr", "--array=0-7 -d aftercorr:{arr}"),
    C("dep-afterburstbuffer", "-d afterburstbuffer:{job1}"),
    C("dep-singleton", "-d singleton"),
    C("dep-delay-minutes", "-d afterok:{job1}+5"),
    C("dep-after-delay", "-d after:{job2}+30"),
    C("dep-two-jobs-colon", "-d afterok:{job1}:{job2}"),
    C("dep-all-comma", "-d afterok:{job1},afternotok:{job2}"),
    C("dep-any-question", "-d afterok:{job1}?afterany:{job3}"),
    C("dep-bare-id", "-d {job3}"),
    C("dep-array-all-tasks", "-d afterok:{arr}_*"),
    C("dep-array-task", "-d afterany:{arr}_2"),
    C("dep-array-task-range", "-d afterok:{arr}_[1-3]"),
    C("dep-array-task-list", "-d afternotok:{arr}_[0,4-5]"),
    C("dep-singleton-and-job", "-d singleton,afterany:{job1}"),
    C("dep-upper-case-type", "-d AFTEROK:{job1}"),
    C("dep-mixed-delays", "-d afterany:{job1}+10:{job2}"),
    # --- --begin (compared with a tolerance) -------------------------------------------
    C("begin-now-plus-hour", "--begin=now+1hour"),
    C("begin-now-plus-minutes", "--begin=now+30minutes"),
    C("begin-now-plus-seconds-default", "--begin=now+600"),
    C("begin-now-plus-days", "--begin=now+2days"),
    C("begin-now-plus-week", "--begin=now+1week"),
    C("begin-time-of-day", "--begin=16:00"),
    C("begin-time-with-seconds", "--begin=23:59:30"),
    C("begin-teatime", "--begin=teatime"),
    C("begin-noon", "--begin=noon"),
    C("begin-midnight", "--begin=midnight"),
    C("begin-fika", "--begin=fika"),
    C("begin-tomorrow", "--begin=tomorrow"),
    C("begin-today", "--begin=today"),
    C("begin-iso-date", "--begin=2030-01-01"),
    C("begin-iso-datetime", "--begin=2030-06-15T12:34:56"),
    C("begin-mm-dd", "--begin=12/25"),
    C("begin-mm-dd-yy", "--begin=12/25/30"),
    C("begin-mmdd", "--begin=1225"),
    C("begin-dotted", "--begin=12.31.29"),
    C("begin-pm", "--begin=4:30PM"),
    C("begin-tomorrow-time", "--begin=tomorrowT10:00"),
    C("deadline-with-begin", "--begin=now+1hour --deadline=now+3days"),
    # --- output patterns ---------------------------------------------------------------
    C("out-job-id", "-o out-%j.txt"),
    C("out-job-id-upper", "-o out-%J.txt"),
    C("out-name-user", "-o %x-%u.log"),
    C("out-node-pattern", "-o %N-%n-%t-%s.log"),
    C("out-percent-literal", "-o 100%%-%j.out"),
    C("out-widths", "-o w%3a-%5j-%10x.out"),
    C("out-absolute", "-o /tmp/abs-%j.out"),
    C("out-relative-dir", "-o logs/%x/%j.out"),
    C("out-none", "-o none"),
    C("err-only", "-e err-%j.txt"),
    C("out-and-err", "-o o-%j.out -e e-%j.err"),
    C("input-file", "-i input.txt"),
    C("input-none", "--input=none"),
    C("out-in-chdir", "-D /tmp -o rel-%j.out"),
    C("chdir-absolute", "--chdir=/var/tmp"),
    C("chdir-relative", "-D subdir"),
    C("open-mode", "--open-mode=append -o app.out"),
    # --- exclusive, sharing, requeue ---------------------------------------------------
    C("exclusive", "--exclusive"),
    C("exclusive-user", "--exclusive=user"),
    C("exclusive-mcs", "--exclusive=mcs"),
    C("oversubscribe", "--oversubscribe"),
    C("oversubscribe-short", "-s"),
    C("exclusive-then-oversubscribe", "--exclusive", "-s"),
    C("requeue", "--requeue"),
    C("no-requeue", "--no-requeue"),
    C("requeue-last-wins", "--no-requeue", "--requeue"),
    C("contiguous", "--contiguous -N 2"),
    # --- signal, switches, mail, nice, comment -----------------------------------------
    C("signal-name", "--signal=USR1"),
    C("signal-with-time", "--signal=USR1@120"),
    C("signal-batch", "--signal=B:TERM@60"),
    C("signal-number", "--signal=10"),
    C("signal-sig-prefix", "--signal=SIGUSR2@30"),
    C("switches-count", "--switches=1"),
    C("switches-wait", "--switches=2@10:00"),
    C("switches-wait-capped", "--switches=1@1-0"),
    C("mail-begin-end", "--mail-type=BEGIN,END"),
    C("mail-all-user", "--mail-type=ALL --mail-user=someone@example.org"),
    C("mail-fail-lower", "--mail-type=fail"),
    C("mail-none", "--mail-type=NONE"),
    C("mail-time-limits", "--mail-type=TIME_LIMIT,TIME_LIMIT_90,TIME_LIMIT_80,TIME_LIMIT_50"),
    C("mail-ors", "--mail-type=BEGIN", "--mail-type=REQUEUE"),
    C("mail-user-only", "--mail-user=a@b.c"),
    C("mail-invalid-depend", "--mail-type=INVALID_DEPEND,STAGE_OUT"),
    C("nice-default", "--nice"),
    C("nice-value", "--nice=10"),
    C("nice-negative", "--nice=-5"),
    C("nice-zero", "--nice=0"),
    C("comment-plain", "--comment=hello"),
    C("comment-spaces-double", '--comment="hello world"'),
    C("comment-spaces-single", "--comment='it is  spaced'"),
    C("comment-quotes-inside", "--comment='say \"hi\"'"),
    C("comment-hash-in-quotes", '--comment="issue #42"'),
    # --- names, partitions, accounts, constraints, misc --------------------------------
    C("job-name", "-J myjob"),
    C("job-name-long", "--job-name=a-rather-long-job-name-with-dashes_and_underscores"),
    C("job-name-spaces", '-J "two words"'),
    C("partition", "-p gpu"),
    C("partition-list", "--partition=cpu,gpu"),
    C("account", "-A xcore"),
    C("account-upper-is-lowered", "--account=CALDERA"),
    C("qos", "--qos=debug"),
    C("qos-short", "-q standby"),
    C("constraint", "-C v100"),
    C("constraint-and", "--constraint=gpu&a100"),
    C("constraint-or", "--constraint='cpu|gpu'"),
    C("licenses", "-L cscratch1:2"),
    C("licenses-list", "--licenses=cscratch1:2,matlab"),
    C("nodelist", "-w node[01-02]"),
    C("nodelist-more-than-nodes", "-w node01,node03 -N 1"),
    C("exclude", "-x node02"),
    C("reservation", "--reservation=AI_workshop_Day1"),
    C("wckey", "--wckey=project-x"),
    C("priority", "--priority=100"),
    C("export-none", "--export=NONE"),
    C("get-user-env", "--get-user-env"),
    C("kill-on-invalid-dep", "--kill-on-invalid-dep=yes -d afterok:{job1}"),
    C("clusters", "-M caldera"),
    C("distribution", "-m block:cyclic -n 2"),
    C("no-kill", "-k"),
    C("no-kill-off", "--no-kill=off"),
    C("gpu-bind-unchecked", "--gpu-bind=nowhere"),
    C("cpu-freq-range-gov", "--cpu-freq=1000-2000:performance"),
    C("cpu-freq-named", "--cpu-freq=high"),
    C("mem-bind-map", "--mem-bind=map_mem:0,1"),
    C("acctg-freq", "--acctg-freq=task=30,energy=60"),
    C("profile-task", "--profile=task"),
    C("gres-flags", "--gres-flags=enforce-binding"),
    C("delay-boot", "--delay-boot=10"),
    C("wait-all-nodes", "--wait-all-nodes=1"),
    C("distribution-plane", "-m plane=2 -n 4"),
    C("distribution-star", "-m *:* -n 2"),
    C("distribution-pack", "-m block,pack -n 2"),
    C("distribution-arbitrary", "-m arbitrary -w node[01-02]"),
    C("hold-flag-in-script", "-H -J held-twice"),
    C("abbreviated-long-option", "--job=abbrev --part=cpu"),
    C("short-clusters-of-flags", "-Os -n 2"),
    C("short-option-attached", "-n4 -c2 -t10"),
    C("long-option-separate-value", "--time 15 --job-name sep"),
    # --- hetjob components -------------------------------------------------------------
    C("hetjob-two", "-n 1 -c 2 -J het", "hetjob", "-n 2 --mem=2G"),
    C("hetjob-three-partitions", "-p cpu -n 1", "hetjob", "-p gpu --gres=gpu:1", "hetjob", "-N 2"),
    C("hetjob-inherits-time", "-t 30 -J inh", "hetjob", "-n 3"),
    C("hetjob-resets-partition-and-mail", "-p gpu --mail-type=END -x node01", "hetjob", "-n 2"),
    C("hetjob-inherits-mem", "--mem=3G", "hetjob", "-n 2"),
    # --- script syntax (script mode only) ----------------------------------------------
    S("several-options-per-line", SHEBANG + "#SBATCH -N 1 -n 2 -t 10 -J multi\n" + BODY),
    S("extra-spaces-and-tabs", SHEBANG + "#SBATCH    --time=10\t-J  spaced\n" + BODY),
    S("trailing-comment", SHEBANG + "#SBATCH -J named # a trailing comment\n" + BODY),
    S("hash-glued-ends-token", SHEBANG + "#SBATCH -J ab#cd\n" + BODY),
    S("escaped-space", SHEBANG + "#SBATCH -J two\\ words\n" + BODY),
    S("escaped-quote", SHEBANG + '#SBATCH --comment=say\\"hi\n' + BODY),
    S("single-quoted-hash", SHEBANG + "#SBATCH --comment='a # b'\n" + BODY),
    S("quote-mid-word", SHEBANG + '#SBATCH --comment=pre"mid dle"post\n' + BODY),
    S("option-value-next-line", SHEBANG + "#SBATCH -J\n#SBATCH nextline\n" + BODY),
    S("after-first-command-ignored", SHEBANG + "#SBATCH -t 5\necho hi\n#SBATCH -t 99\n"),
    S(
        "blank-and-comment-lines",
        SHEBANG + "\n# a comment\n\n#SBATCH -t 7\n   \n#SBATCH -J bc\n" + BODY,
    ),
    S("indented-directive-ignored", SHEBANG + "  #SBATCH -t 8\n#SBATCH -J indent\n" + BODY),
    S("slurm-magic-warns", SHEBANG + "#SLURM -t 9\n#SLURM -J slurmmagic\n" + BODY),
    S("lowercase-magic-is-comment", SHEBANG + "#sbatch -t 9\n#SBATCH -J lower\n" + BODY),
    S("space-before-magic-word", SHEBANG + "# SBATCH -t 9\n" + BODY),
    S("no-space-after-magic", SHEBANG + "#SBATCH--time=12\n" + BODY),
    S("directive-equals-and-space", SHEBANG + "#SBATCH --time 13 --nodes=1\n" + BODY),
    S("hetjob-in-script", SHEBANG + "#SBATCH -n 1\n#SBATCH hetjob\n#SBATCH -n 2 -c 2\n" + BODY),
    S("packjob-in-script", SHEBANG + "#SBATCH -n 1\n#SBATCH packjob\n#SBATCH -n 2\n" + BODY),
    S(
        "hetjob-cli-and-script",
        SHEBANG + "#SBATCH -n 1\n#SBATCH hetjob\n#SBATCH -n 2\n" + BODY,
        "-t",
        "11",
        ":",
        "-t",
        "12",
    ),
    S(
        "hetjob-script-cli-applies-to-each",
        SHEBANG + "#SBATCH -n 1\n#SBATCH hetjob\n#SBATCH -n 2\n" + BODY,
        "-t",
        "17",
        "--comment=both",
    ),
    S(
        "hetjob-line-rest-ignored",
        SHEBANG + "#SBATCH -n 1\n#SBATCH hetjob -n 5 :\n#SBATCH -c 2\n" + BODY,
    ),
    S("hetjob-word-mid-line", SHEBANG + "#SBATCH -J mid hetjob -t 9\n" + BODY),
    S("empty-quoted-token-ends-line", SHEBANG + '#SBATCH --comment=x "" -t 9\n' + BODY),
    S("core-spec-warns", SHEBANG + "#SBATCH -S 1\n" + BODY),
    S("thread-spec-warns", SHEBANG + "#SBATCH --thread-spec=1\n" + BODY),
    S("cli-overrides-script", SHEBANG + "#SBATCH -t 5 -J scriptname\n" + BODY, "-t", "6"),
    S("script-args", SHEBANG + "#SBATCH -J withargs\n" + BODY, script_args=("a b", "-t", "5")),
    S("shebang-only-directives", "#!/bin/sh\n#SBATCH -J onlyshebang\n"),
    S("unicode-name", SHEBANG + "#SBATCH -J naïve-ジョブ\n" + BODY),
    S("crlf-free-trailing-spaces", SHEBANG + "#SBATCH -J trailing   \n" + BODY),
    S("wrap-ignores-script", SHEBANG + BODY, "--wrap=echo hello"),
)


def test_case_ids_are_unique() -> None:
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


def test_there_are_at_least_150_cases() -> None:
    assert len(CASES) >= 150


def test_every_required_form_is_covered() -> None:
    text = "\n".join(" ".join(c.lines) + (c.script or "") for c in CASES)
    required = [
        "--time=0",
        "--time=1:30",
        "--time=2:00:00",
        "--time=1-0",
        "--time=1-2:30",
        "--time=2-03:04:05",
        "UNLIMITED",
        "0:59",
        "1500K",
        "2048KB",
        "4096M",
        "4G",
        "1T",
        "-N 1-3",
        "-N 2-0",
        "gpu:a100:2",
        "--gpus=2",
        "--gpus-per-node=v100:2",
        "--gpus-per-task",
        "1,3,5",
        "0-20:5",
        "%2",
        "%3",
        "99990-100000",
        "after:",
        "afterany:",
        "afterok:",
        "afternotok:",
        "aftercorr:",
        "afterburstbuffer:",
        "singleton",
        "+5",
        "?",
        "_*",
        "_[1-3]",
        "now+1hour",
        "2030-01-01",
        "16:00",
        "today",
        "tomorrow",
        "midnight",
        "noon",
        "teatime",
        "%j",
        "%J",
        "%A",
        "%a",
        "%x",
        "%u",
        "%N",
        "%n",
        "%t",
        "%s",
        "%%",
        "%3a",
        "--exclusive=user",
        "--signal=",
        "--switches=",
        "--mail-type=",
        "--nice",
        "#SLURM",
        "hetjob",
        "# a trailing comment",
    ]
    missing = [r for r in required if r not in text]
    assert not missing


def test_every_option_case_builds_in_each_of_its_modes() -> None:
    subs = {"job1": "11", "job2": "12", "job3": "13", "arr": "14"}
    for case in CASES:
        for mode in case.modes():
            built = build(case, mode, subs)
            assert built.script.startswith("#!")
            assert "{job" not in built.script + " ".join(built.argv)
