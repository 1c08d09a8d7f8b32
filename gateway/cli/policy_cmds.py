"""The `sacctmgr`, `sshare` and `sprio` commands: the gateway answers each one with the
command's own output (gateway/api/policy_routes.py); these print it. sacctmgr without
`-i` asks before committing a change, as sacctmgr does ("(N/y): ", 30 seconds)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from gateway.cli.common import GatewayError, call
from gateway.compat.options_help import version_text

__all__ = ["sacctmgr_main", "sprio_main", "sshare_main"]

_ASK = "Would you like to commit changes? (You have 30 seconds to decide)\n"
_TIMEOUT_S = 30.0


def _print(answer: Any) -> int:
    sys.stdout.write(str(answer.get("stdout", "")))
    sys.stdout.flush()
    sys.stderr.write(str(answer.get("stderr", "")))
    return int(answer.get("rc", 1))


def _run(prog: str, url: str, argv: Sequence[str], commit: bool = False) -> Any:
    try:
        return call("POST", url, {"argv": list(argv), "commit": commit})
    except GatewayError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        return None


def _immediate(argv: Sequence[str]) -> bool:
    """Whether -i/--immediate is among sacctmgr's leading options."""
    for word in argv:
        if not word.startswith("-"):
            return False
        if word == "--immediate" or (not word.startswith("--") and "i" in word[1:]):
            return True
    return False


def _answer_yes() -> bool:
    """sacctmgr's `commit_check`: one character at a time, a newline after each; y commits,
    n or an empty line discards, anything else asks again; no answer within 30 seconds
    prints "timeout" and discards. End of input discards (sacctmgr would spin on it)."""
    import os
    import select

    fd = sys.stdin.fileno()
    char = ""
    while char not in ("y", "Y", "n", "N", "\n"):
        if char:
            sys.stdout.write("Y or N please\n")
        sys.stdout.write("(N/y): ")
        sys.stdout.flush()
        ready, _, _ = select.select([fd], [], [], _TIMEOUT_S)
        if not ready:
            sys.stdout.write("timeout\n")
            return False
        data = os.read(fd, 1)
        sys.stdout.write("\n")
        if not data:
            return False
        char = data.decode("latin-1")
    return char in ("y", "Y")


def sacctmgr_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `sacctmgr`."""
    args = list(sys.argv[1:] if argv is None else argv)
    immediate = _immediate(args)
    answer = _run("sacctmgr", "/v1/policy/sacctmgr", args, commit=immediate)
    if answer is None:
        return 1
    rc = _print(answer)
    if not answer.get("ask"):
        return rc
    sys.stdout.write(_ASK)
    if _answer_yes():
        again = _run("sacctmgr", "/v1/policy/sacctmgr", args, commit=True)
        if again is None:
            return 1
        if again.get("rc"):
            sys.stderr.write(str(again.get("stderr", "")))
        return int(again.get("rc", 1))
    sys.stdout.write(" Changes Discarded\n")
    return 0


def _version_asked(argv: Sequence[str]) -> bool:
    """`-V` or `--version` among the options (before `--`): the version, nothing else."""
    for word in argv:
        if word == "--":
            return False
        if word == "--version" or (word.startswith("-V") and not word.startswith("--")):
            return True
    return False


def sshare_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `sshare`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if _version_asked(args):
        sys.stdout.write(version_text())
        return 0
    answer = _run("sshare", "/v1/policy/sshare", args)
    return 1 if answer is None else _print(answer)


def sprio_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `sprio`."""
    args = list(sys.argv[1:] if argv is None else argv)
    if _version_asked(args):
        sys.stdout.write(version_text())
        return 0
    answer = _run("sprio", "/v1/policy/sprio", args)
    return 1 if answer is None else _print(answer)
