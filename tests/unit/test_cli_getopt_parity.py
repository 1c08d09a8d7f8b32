"""Option parsing of squeue, sacct, scancel, sinfo and scontrol as Slurm 22.05's commands do it.

Every expected line below was read off the real commands (Debian's slurm-client 22.05.8):
GNU getopt_long permutation, `--` ending options, optional arguments only when attached,
unique prefixes (glibc's ambiguity message), each command's own exit-at-once options and
`Try "... --help"` line. tests/differential/test_cli_parsing_vs_slurm.py runs the same argv
through the real commands.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType

import pytest

from gateway.cli import sacct_cmd, scancel_cmd, scontrol_cmd, sinfo_cmd, squeue_cmd
from gateway.cli.opts import CmdUsageError, ParsedCmd, parse_command

COMMANDS: dict[str, ModuleType] = {
    "squeue": squeue_cmd,
    "sacct": sacct_cmd,
    "scancel": scancel_cmd,
    "sinfo": sinfo_cmd,
    "scontrol": scontrol_cmd,
}


def _parse(prog: str, argv: Sequence[str]) -> ParsedCmd:
    return parse_command([prog, *argv], COMMANDS[prog].OPTIONS, prog)


def _squeue(argv: Sequence[str]) -> ParsedCmd:
    opts = _parse("squeue", argv)
    squeue_cmd._operands(opts)
    return opts


# (argv, expected option values (subset), expected operands)
PARSED: list[tuple[str, list[str], dict[str, object], list[str]]] = [
    ("scontrol", ["show", "job", "-o", "12"], {"oneliner": True}, ["show", "job", "12"]),
    ("scontrol", ["-o", "show", "job", "12"], {"oneliner": True}, ["show", "job", "12"]),
    ("scontrol", ["show", "job", "12", "-o"], {"oneliner": True}, ["show", "job", "12"]),
    ("scontrol", ["-dd", "show", "job"], {"details": True}, ["show", "job"]),
    ("scontrol", ["--one", "show", "--", "-o"], {"oneliner": True}, ["show", "-o"]),
    ("scontrol", ["--clu=c1", "show", "node"], {"clusters": "c1"}, ["show", "node"]),
    ("scancel", ["5", "-s", "KILL", "6"], {"signal": "KILL"}, ["5", "6"]),
    ("scancel", ["--sign=TERM", "--", "-7"], {"signal": "TERM"}, ["-7"]),
    ("scancel", ["--jobn", "x", "7"], {"name": "x"}, ["7"]),
    ("sacct", ["-j", "5", "-j6,7"], {"jobs": ["5", "6,7"]}, []),
    ("sacct", ["--jo=5", "-X", "-P"], {"jobs": ["5"], "allocations": True}, []),
    ("sacct", ["--whole-hetjob", "-j", "5"], {"whole_hetjob": True}, []),
    ("sacct", ["--whole=yes"], {"whole_hetjob": "yes"}, []),
    ("sinfo", ["-Nh", "--part", "debug"], {"node_view": True, "noheader": True}, []),
    ("sinfo", ["--Node", "-o%N"], {"node_view": True, "format": "%N"}, []),
]


@pytest.mark.parametrize(("prog", "argv", "values", "operands"), PARSED)
def test_options_and_operands(
    prog: str, argv: list[str], values: dict[str, object], operands: list[str]
) -> None:
    opts = _parse(prog, argv)
    assert {k: opts.values.get(k) for k in values} == values
    assert opts.operands == operands


# squeue after its operand step: (argv, jobs, steps, other values)
SQUEUE: list[tuple[list[str], str | None, str | None, dict[str, object]]] = [
    (["-j", "12"], "12", None, {}),
    (["-j12"], "12", None, {}),
    (["--jobs", "12,13"], "12,13", None, {}),
    (["--jobs=12"], "12", None, {}),
    (["--jo", "12"], "12", None, {}),
    (["12", "-h", "-j"], "12", None, {"noheader": True}),
    (["-j5", "6"], "6", None, {}),
    (["-j5", "-j"], "5", None, {}),
    (["-j", "-s", "5", "5.0"], "5", "5.0", {}),
    (["-s", "5.0"], None, "5.0", {}),
    (["-hj", "7", "-o", "%i"], "7", None, {"noheader": True, "format": "%i"}),
    (["-j", "--", "8"], "8", None, {}),
    (["--nodel=n1", "-j", "9"], "9", None, {"nodelist": "n1"}),
    (["--node", "n2"], None, None, {"nodelist": "n2"}),
    (["--sib", "--me"], None, None, {"sibling": True, "me": True}),
    (["-t", "pd,r", "--use", "root"], None, None, {"states": "pd,r", "users": "root"}),
]


@pytest.mark.parametrize(("argv", "jobs", "steps", "values"), SQUEUE)
def test_squeue_reads_the_job_list_operand(
    argv: list[str], jobs: str | None, steps: str | None, values: dict[str, object]
) -> None:
    opts = _squeue(argv)
    assert opts.text("jobs") == jobs
    assert opts.text("steps") == steps
    assert {k: opts.values.get(k) for k in values} == values


def _try(prog: str) -> str:
    return f'Try "{prog} --help" for more information\n'


# (prog, argv, exact stderr, exit status): each line as the real 22.05 command prints it.
ERRORS: list[tuple[str, list[str], str, int]] = [
    ("squeue", ["-Z"], "squeue: invalid option -- 'Z'\n" + _try("squeue"), 1),
    (
        "squeue",
        ["--no"],
        "squeue: option '--no' is ambiguous; possibilities: '--noconvert' '--node' '--nodes'"
        " '--nodelist' '--noheader'\n" + _try("squeue"),
        1,
    ),
    (
        "squeue",
        ["--st"],
        "squeue: option '--st' is ambiguous; possibilities: '--start' '--steps' '--states'\n"
        + _try("squeue"),
        1,
    ),
    ("squeue", ["--use"], "squeue: option '--user' requires an argument\n" + _try("squeue"), 1),
    ("squeue", ["-j5", "--foo=3"], "squeue: unrecognized option '--foo=3'\n" + _try("squeue"), 1),
    ("squeue", ["-o"], "squeue: option requires an argument -- 'o'\n" + _try("squeue"), 1),
    ("squeue", ["-j", "-5"], "squeue: invalid option -- '5'\n" + _try("squeue"), 1),
    (
        "squeue",
        ["--all=1"],
        "squeue: option '--all' doesn't allow an argument\n" + _try("squeue"),
        1,
    ),
    ("squeue", ["-j", "x"], "squeue: error: Invalid job id: x\n", 1),
    ("squeue", ["-j", "0"], "squeue: error: Invalid job id: 0\n", 1),
    ("squeue", ["-j=5"], "squeue: error: Invalid job id: =5\n", 1),
    ("squeue", ["-jx", "--jobs"], "squeue: error: Invalid job id: x\n", 1),
    ("squeue", ["-j", "5", "6"], "squeue: error: Unrecognized option: 6\n", 1),
    ("squeue", ["5"], "squeue: error: Unrecognized option: 5\n", 1),
    ("squeue", ["--", "-j"], "squeue: error: Unrecognized option: -j\n", 1),
    (
        "squeue",
        ["-t", "pd,bogus", "-Z"],
        "squeue: error: Invalid job state specified: bogus\n"
        f"squeue: error: Valid job states include: {squeue_cmd._VALID_STATES}\n\n",
        1,
    ),
    ("squeue", ["-Z", "-t", "bogus"], "squeue: invalid option -- 'Z'\n" + _try("squeue"), 1),
    ("squeue", ["--help", "-Z"], "", 0),
    ("squeue", ["--version", "-Z"], "", 0),
    ("sacct", ["-Z"], "sacct: invalid option -- 'Z'\n", 1),
    (
        "sacct",
        ["--no"],
        "sacct: option '--no' is ambiguous; possibilities: '--nodelist' '--noconvert'"
        " '--noheader'\n",
        1,
    ),
    (
        "sacct",
        ["--all=@"],
        "sacct: option '--all=@' is ambiguous; possibilities: '--allusers' '--allocations'"
        " '--allclusters'\n",
        1,
    ),
    ("sacct", ["-j"], "sacct: option requires an argument -- 'j'\n", 1),
    ("sacct", ["--jobs"], "sacct: option '--jobs' requires an argument\n", 1),
    ("sacct", ["-j", "5,x"], "sacct: fatal: Bad job/step specified: x\n", 1),
    ("sacct", ["-R", "x"], "sacct: invalid option -- 'R'\n", 1),
    ("sacct", ["--bogus=3"], "sacct: unrecognized option '--bogus=3'\n", 1),
    ("sacct", ["-h", "-Z"], "sacct: invalid option -- 'Z'\n", 1),
    ("sacct", ["-e", "-Z"], "sacct: invalid option -- 'Z'\n", 1),
    ("sacct", ["-V", "-Z"], "", 0),
    (
        "sacct",
        ["-n", "5", "-X", "6"],
        "sacct: error: Unknown arguments:\nsacct: error:  5\nsacct: error:  6\n",
        1,
    ),
    ("sacct", ["-h", "5"], "", 0),
    ("scancel", ["-Z"], "scancel: invalid option -- 'Z'\n" + _try("scancel"), 1),
    (
        "scancel",
        ["--n"],
        "scancel: option '--n' is ambiguous; possibilities: '--name' '--nodelist'\n"
        + _try("scancel"),
        1,
    ),
    (
        "scancel",
        ["--si=TERM", "5"],
        "scancel: option '--si=TERM' is ambiguous; possibilities: '--sibling' '--signal'\n"
        + _try("scancel"),
        1,
    ),
    ("scancel", ["x"], "scancel: error: Invalid job id x\n", 1),
    ("scancel", ["--", "-5"], "scancel: error: Invalid job id -5\n", 1),
    ("scancel", [], "scancel: error: No job identification provided\n", 1),
    (
        "scancel",
        ["--me=1"],
        "scancel: option '--me' doesn't allow an argument\n" + _try("scancel"),
        1,
    ),
    (
        "scancel",
        ["--sibling"],
        "scancel: option '--sibling' requires an argument\n" + _try("scancel"),
        1,
    ),
    ("scancel", ["--usage", "-Z"], "", 0),
    ("sinfo", ["-Z", "foo"], "sinfo: invalid option -- 'Z'\n" + _try("sinfo"), 1),
    (
        "sinfo",
        ["--no"],
        "sinfo: option '--no' is ambiguous; possibilities: '--nodes' '--noconvert'"
        " '--noheader'\n" + _try("sinfo"),
        1,
    ),
    ("sinfo", ["-i"], "sinfo: option requires an argument -- 'i'\n" + _try("sinfo"), 1),
    (
        "sinfo",
        ["--Node=1"],
        "sinfo: option '--Node' doesn't allow an argument\n" + _try("sinfo"),
        1,
    ),
    ("scontrol", ["-Z"], "scontrol: invalid option -- 'Z'\n" + _try("scontrol"), 1),
    ("scontrol", ["--no"], "scontrol: unrecognized option '--no'\n" + _try("scontrol"), 1),
    (
        "scontrol",
        ["--uid"],
        "scontrol: option '--uid' requires an argument\n" + _try("scontrol"),
        1,
    ),
    ("scontrol", ["-M"], "scontrol: option requires an argument -- 'M'\n" + _try("scontrol"), 1),
    (
        "scontrol",
        ["--version=1"],
        "scontrol: option '--version' doesn't allow an argument\n" + _try("scontrol"),
        1,
    ),
    ("scontrol", ["--", "-o", "show"], "invalid keyword: -o\n", 1),
    ("scontrol", ["show"], "too few arguments for keyword:show\n", 1),
    ("scontrol", ["show", "job", "12", "13"], "too many arguments for keyword:show\n", 1),
    ("scontrol", ["show", "hostnames", "a", "b"], "too many arguments for keyword:show\n", 1),
    ("scontrol", ["show", "job", "x"], "scontrol_print_job error: Invalid job id specified\n", 1),
    (
        "scontrol",
        ["show", "job", "-o", "x"],
        "scontrol_print_job error: Invalid job id specified\n",
        1,
    ),
    ("scontrol", ["hold"], "too few arguments for keyword:hold\n", 1),
    (
        "scontrol",
        ["update", "JobId=5", "ArrayTaskThrottle=-1"],
        "scontrol: error: Invalid ArrayTaskThrottle value\n",
        1,
    ),
    (
        "scontrol",
        ["update", "JobId=5", "arraytask=3"],
        "Update of this parameter is not supported: arraytask=3\nRequest aborted\n",
        1,
    ),
    ("scontrol", ["--help", "-Z"], "", 0),
]


@pytest.mark.parametrize(("prog", "argv", "stderr", "status"), ERRORS)
def test_errors_and_exit_status(
    prog: str,
    argv: list[str],
    stderr: str,
    status: int,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("POSIXLY_CORRECT", raising=False)
    assert COMMANDS[prog].main(argv) == status
    assert capsys.readouterr().err == stderr


def test_squeue_reports_unknown_users_and_keeps_filtering(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert squeue_cmd._users("nosuchuser,0", report=True) == ("root",)
    assert squeue_cmd._users("99999") == ("",)  # a filter no job passes
    assert squeue_cmd._users(None) == ()
    assert capsys.readouterr().err == "squeue: error: Invalid user: nosuchuser\n\n"
    assert squeue_cmd.main(["-u", "99999", "-Z"]) == 1
    assert capsys.readouterr().err == (
        "squeue: error: Invalid user: 99999\n\nsqueue: invalid option -- 'Z'\n" + _try("squeue")
    )


def test_squeue_prints_its_usage_on_stdout_for_a_stray_operand(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert squeue_cmd.main(["-j", "1", "2"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("Usage: squeue [-A account] [--clusters names]")
    assert out.endswith("\t      [-ahjlrsv]\n")


def test_posixly_correct_stops_at_the_first_operand(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POSIXLY_CORRECT", "1")
    opts = _parse("scontrol", ["show", "job", "-o", "12"])
    assert opts.operands == ["show", "job", "-o", "12"]
    assert not opts.flag("oneliner")
    with pytest.raises(CmdUsageError) as err:
        _squeue(["-j", "5", "-h"])
    assert err.value.lines == ("squeue: error: Unrecognized option: -h",)


def test_the_tables_are_the_real_commands_option_strings() -> None:
    """Short letters and arguments as `getopt_long(..., "<optstring>", ...)` of 22.05."""
    optstrings = {
        "squeue": "A:ahi:j::lL:M:n:O:o:Pp:q:R:rS:s::t:U:u:Vvw:",
        "sacct": "aA:bBcC:DeE:f:F:g:hi:I:j:k:K:lLM:nN:o:pPq:r:s:S:tTu:UvVW:x:X",
        "scancel": "A:bfHiM:n:p:q:QR:s:t:u:vVw:",
        "sinfo": "adehi:lM:n:NO:o:p:rRsS:t:TvV",
        "scontrol": "adFhM:oQu:vV",
    }
    for prog, optstring in optstrings.items():
        table = {o.short: o.arg for o in COMMANDS[prog].OPTIONS if o.short}
        expected: dict[str, int] = {}
        i = 0
        while i < len(optstring):
            letter, i = optstring[i], i + 1
            colons = len(optstring[i:]) - len(optstring[i:].lstrip(":"))
            expected[letter], i = colons, i + colons
        assert table == expected, prog
