"""Batch scripts as sbatch reads them: sanity checks, the #SBATCH tokenizer, getopt."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.compat.errors import CompatError, ScriptError
from gateway.compat.getopt import GetoptError, ParsedArg, getopt_long
from gateway.compat.optypes import Origin
from gateway.compat.script import (
    _get_argument,
    _is_component_separator,
    check_script,
    read_directives,
)

ALL = frozenset(Origin)
SLURM = frozenset({Origin.SLURM})


def words(body: str, component: int = 0) -> list[str]:
    return read_directives("#!/bin/sh\n" + body, "job.sh", component).argv[1:]


# --- script checks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "first_line"),
    [
        ("", "Batch script is empty!"),
        (" \n\t", "Batch script contains only whitespace!"),
        ("echo hi\n", "This does not look like a batch script.  The first"),
        ("#!/bin/sh\ntrue\0\n", "The Slurm controller does not allow scripts that"),
        ("#!/bin/sh\r\ntrue\r\n", "Batch script contains DOS line breaks (\\r\\n)"),
    ],
)
def test_scripts_sbatch_refuses(text: str, first_line: str) -> None:
    with pytest.raises(ScriptError) as info:
        check_script(text)
    assert info.value.lines[0].text == first_line
    assert info.value.exit_code == 1


def test_a_shebang_script_passes() -> None:
    check_script("#!/bin/bash\n#SBATCH -t 5\nsrun x\n")


# --- the #SBATCH tokenizer ----------------------------------------------------------------


def test_quotes_and_escapes_are_removed() -> None:
    assert words('#SBATCH --comment="hello world" -J a\\"b\n') == [
        "--comment=hello world",
        "-J",
        'a"b',
    ]


def test_a_backslash_does_not_escape_a_blank() -> None:
    assert words("#SBATCH -J two\\ words\n") == ["-J", "two", "words"]
    assert words('#SBATCH --comment=pre"mid dle"post\n') == ["--comment=premid dlepost"]


def test_an_unquoted_hash_ends_the_line() -> None:
    assert words("#SBATCH -J named # a comment\n") == ["-J", "named"]
    assert words("#SBATCH -J ab#cd\n") == ["-J", "ab"]
    assert words("#SBATCH --comment='a # b'\n") == ["--comment=a # b"]


def test_several_options_per_line_and_an_argument_on_the_next_line() -> None:
    assert words("#SBATCH -N 1 -n 2\n#SBATCH -J\n#SBATCH next\n") == [
        "-N",
        "1",
        "-n",
        "2",
        "-J",
        "next",
    ]


def test_reading_stops_at_the_first_command() -> None:
    assert words("#SBATCH -t 5\necho hi\n#SBATCH -t 99\n") == ["-t", "5"]


def test_blank_lines_comments_and_indented_directives_are_skipped() -> None:
    assert words("\n# note\n   \n  #SBATCH -t 8\n#SBATCH -J x\n") == ["-J", "x"]


def test_slurm_magic_is_read_with_a_warning() -> None:
    found = read_directives("#!/bin/sh\n#SLURM -t 9\n#SLURM -J y\n", "j.sh")
    assert found.argv[1:] == ["-t", "9", "-J", "y"]
    assert [w.text for w in found.warnings] == [
        "Change from #SLURM to #SBATCH in your script and verify the options are valid in sbatch"
    ]


def test_an_empty_quoted_token_ends_the_line() -> None:
    assert words('#SBATCH --comment=x "" -t 9\n') == ["--comment=x"]


def test_hetjob_separators_split_components_and_end_their_line() -> None:
    body = "#SBATCH -n 1\n#SBATCH hetjob -n 5\n#SBATCH -c 2\n#SBATCH packjob\n#SBATCH -N 3\n"
    assert words(body, 0) == ["-n", "1"]
    assert words(body, 1) == ["-c", "2"]
    second = read_directives("#!/bin/sh\n" + body, "j.sh", 2)
    assert second.argv[1:] == ["-N", "3"]
    assert second.packjob
    assert read_directives("#!/bin/sh\n" + body, "j.sh", 0).more_components


@pytest.mark.parametrize(
    ("body", "line"),
    [
        (
            "#SBATCH --comment='abc\n",
            "sbatch: fatal: job.sh: line 2: Unmatched `'` in [--comment='abc]\n",
        ),
        ("#SBATCH -n 1 : -n 2\n", "sbatch: fatal: job.sh: line 2: Unexpected `:` in [ : -n 2]\n"),
    ],
)
def test_tokenizer_errors_are_fatal_like_slurm(body: str, line: str) -> None:
    with pytest.raises(CompatError) as info:
        words(body)
    assert info.value.render() == line
    assert info.value.exit_code == 1


@given(st.text(alphabet="#SBATCHhetjob -=\"'\\\n\tabc:1", max_size=60))
def test_any_script_text_tokenizes_or_fails_with_a_compat_error(body: str) -> None:
    try:
        found = read_directives("#!/bin/sh\n" + body, "job.sh")
    except CompatError:
        return
    assert all(isinstance(w, str) and w for w in found.argv[1:])


# --- getopt -------------------------------------------------------------------------------


def parsed(argv: list[str]) -> list[tuple[str, str | None]]:
    items, _ = getopt_long(["sbatch", *argv], ALL)
    return [
        (i.option.long or "", i.arg) if isinstance(i, ParsedArg) else ("?", i.text) for i in items
    ]


def test_long_options_take_equals_or_the_next_word() -> None:
    assert parsed(["--time=5", "--job-name", "x"]) == [("time", "5"), ("job-name", "x")]


def test_unique_prefixes_abbreviate() -> None:
    assert parsed(["--job=a", "--part=cpu"]) == [("job-name", "a"), ("partition", "cpu")]


def test_short_options_cluster_and_attach_values() -> None:
    assert parsed(["-Os", "-n4", "-c", "2"]) == [
        ("overcommit", None),
        ("oversubscribe", None),
        ("ntasks", "4"),
        ("cpus-per-task", "2"),
    ]


def test_getopt_errors_are_glibcs_lines() -> None:
    assert parsed(["--tim=5"]) == [
        ("?", "option '--tim=5' is ambiguous; possibilities: '--time' '--time-min'")
    ]
    assert parsed(["--bogus"]) == [("?", "unrecognized option '--bogus'")]
    assert parsed(["-y"]) == [("?", "invalid option -- 'y'")]
    assert parsed(["--hold=yes"]) == [("?", "option '--hold' doesn't allow an argument")]
    assert parsed(["-J"]) == [("?", "option requires an argument -- 'J'")]


def test_parsing_stops_at_the_first_operand() -> None:
    items, optind = getopt_long(["sbatch", "-t", "5", "job.sh", "-J", "x"], ALL)
    assert (optind, len(items)) == (3, 1)


def test_plugin_options_exist_only_where_allowed() -> None:
    items, _ = getopt_long(["sbatch", "--container-image=x"], SLURM)
    assert isinstance(items[0], GetoptError)


@given(
    st.lists(
        st.text(alphabet="-=abcdefghijklmnoprstuvwxyzACDGHJMNOQ:0123", max_size=12), max_size=6
    )
)
def test_any_argv_parses_into_options_and_errors(argv: list[str]) -> None:
    items, optind = getopt_long(["sbatch", *argv], ALL)
    assert 1 <= optind <= len(argv) + 1
    assert all(isinstance(i, ParsedArg | GetoptError) for i in items)


# --- the fast paths read exactly what Slurm's loop reads ------------------------------------


def _reference(body: str, component: int = 0) -> list[str]:
    """Slurm's `_opt_batch_script` loop, line by line through `get_argument`."""
    argv: list[str] = []
    scan = 0
    for lineno, line in enumerate(body.split("\n"), start=1):
        word = next((w for w in ("#SBATCH", "#SLURM", "#CALDERA") if line.startswith(w)), None)
        if word is None:
            stripped = line.lstrip(" \t\n\v\f\r")
            if stripped and stripped[0] != "#":
                break
            continue
        rest = line[len(word) :].lstrip(" \t\n\v\f\r")
        if word != "#CALDERA" and _is_component_separator(rest):
            scan += 1
        if scan < component:
            continue
        if scan > component:
            break
        while True:
            token, used, _ = _get_argument("job.sh", lineno, rest)
            if token is None:
                break
            argv.append(token)
            rest = rest[used:]
    return argv


def _outcome(fn: Callable[[], list[str]]) -> list[str] | str:
    try:
        return fn()
    except CompatError as exc:
        return exc.render()


LINE = st.text(alphabet=" \t#:=-'\"\\abcHETJOBPACKhetjobpack12\x0b\x1cé", max_size=30)


@given(
    st.lists(
        st.tuples(st.sampled_from(["#SBATCH", "#SLURM", "#CALDERA", "", "  #", "x"]), LINE),
        max_size=6,
    ),
    st.integers(0, 2),
)
def test_directives_are_read_exactly_as_slurms_loop_reads_them(
    lines: list[tuple[str, str]], component: int
) -> None:
    body = "#!/bin/sh\n" + "".join(f"{magic}{text}\n" for magic, text in lines) + "true\n"
    fast = _outcome(lambda: read_directives(body, "job.sh", component).argv[1:])
    assert fast == _outcome(lambda: _reference(body, component))
