"""Value converters of the sbatch option table, each mirroring one `arg_set_*` of Slurm 22.05.

A converter takes the option's argument (None when absent), the parse context and the
draft being built, and returns the value to store (or `Updates` for several fields). It
raises CompatError with Slurm's message and exit status for bad values.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from gateway.compat.begin import TimeSpecError, parse_time
from gateway.compat.duration import time_str_to_mins, time_str_to_secs
from gateway.compat.errors import CompatError, Diagnostic, Level
from gateway.compat.optypes import Converter, Draft, ParseContext, Updates
from gateway.compat.quantity import (
    parse_int,
    parse_mail_type,
    parse_node_count,
    parse_signal,
    str_to_mbytes,
)
from gateway.model.jobspec import Sharing
from gateway.model.values import INFINITE, NO_VAL

__all__ = [
    "c_begin",
    "c_chdir",
    "c_checked",
    "c_count",
    "c_cpus_per_task",
    "c_delay_boot",
    "c_dependency",
    "c_distribution",
    "c_exclusive",
    "c_extra_int",
    "c_extra_node_info",
    "c_flag",
    "c_get_user_env",
    "c_gpus",
    "c_gres",
    "c_int",
    "c_kill_on_invalid_dep",
    "c_list",
    "c_mail_type",
    "c_mbytes",
    "c_nice",
    "c_no_kill",
    "c_nodes",
    "c_one_of",
    "c_open_mode",
    "c_path",
    "c_profile",
    "c_secs",
    "c_signal",
    "c_str",
    "c_switches",
    "c_time",
    "c_uid_gid",
    "c_value",
    "c_values",
    "c_verbatim",
    "c_wait_all_nodes",
]


def _req(arg: str | None) -> str:
    """Arguments of REQUIRED options are never None (getopt guarantees it)."""
    return arg if arg is not None else ""


def c_str(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """A plain string (COMMON_STRING_OPTION)."""
    return _req(arg)


def c_list(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """A comma list (`-p a,b`), kept in order."""
    return tuple(p for p in _req(arg).split(",") if p)


def c_flag(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """A flag option: True."""
    return True


def c_value(value: Any) -> Converter:
    """An option that stores a fixed value (`--requeue` -> True, `-s` -> OVERSUBSCRIBE)."""

    def convert(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
        return value

    return convert


def c_count(dest: str) -> Converter:
    """-v/-Q: every occurrence adds one (an environment value sets the level)."""

    def convert(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
        if arg:
            return parse_int("--verbose", arg, False)
        return int(draft.get(dest, 0)) + 1

    return convert


def c_int(name: str, positive: bool = True) -> Converter:
    """COMMON_INT_OPTION: `parse_int` with Slurm's name for the message."""

    def convert(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
        return parse_int(name, _req(arg), positive)

    return convert


def c_cpus_per_task(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`-c`: a positive count."""
    return parse_int("--cpus-per-task", _req(arg), True)


def c_mbytes(option: str) -> Converter:
    """COMMON_MBYTES_OPTION: a size in MiB."""

    def convert(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
        value = str_to_mbytes(_req(arg))
        if value is None:
            raise CompatError.error(f"Invalid {option} specification")
        return value

    return convert


def c_time(option: str) -> Converter:
    """`-t`/`--time-min`: minutes; 0 means INFINITE."""

    def convert(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
        minutes = time_str_to_mins(_req(arg))
        if minutes == NO_VAL:
            raise CompatError.error(f"Invalid {option} specification")
        return INFINITE if minutes == 0 else minutes

    return convert


def c_secs(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """A duration in seconds, unchecked (`SBATCH_WAIT4SWITCH`, as `time_str2secs`)."""
    return time_str_to_secs(_req(arg))


def c_nodes(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`-N min[-max]`."""
    return parse_node_count(_req(arg))


def c_begin(option: str) -> Converter:
    """`--begin`/`--deadline`: an absolute epoch, via parse_time."""

    def convert(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
        text = _req(arg)
        try:
            value = parse_time(text, ctx.now)
        except TimeSpecError as exc:
            raise CompatError(
                Diagnostic(Level.RAW, exc.line()),
                Diagnostic(Level.ERROR, f"Invalid {option} specification"),
            ) from exc
        if value == 0:
            raise CompatError.error(f"Invalid {option} specification")
        return value

    return convert


def c_chdir(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`-D`: made absolute against the submission directory."""
    path = _req(arg)
    return path if path.startswith("/") else os.path.join(ctx.cwd, path)


def c_path(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`-o/-e/-i`: `none` means /dev/null."""
    path = _req(arg)
    return "/dev/null" if path.lower() == "none" else path


def c_exclusive(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`--exclusive[=user|mcs|oversubscribe]`."""
    if arg is None or arg.lower() == "exclusive":
        return Sharing.EXCLUSIVE
    for sharing in (Sharing.OVERSUBSCRIBE, Sharing.USER, Sharing.MCS):
        if arg.lower() == sharing.value:
            return sharing
    raise CompatError.error("Invalid --exclusive specification")


def c_mail_type(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`--mail-type`: Slurm ORs the bits into what earlier options set (NONE adds nothing)."""
    parsed = parse_mail_type(_req(arg))
    if parsed is None:
        raise CompatError.error("Invalid --mail-type specification")
    previous: frozenset[str] = draft.get("mail_type", frozenset())
    return previous | parsed


def c_nice(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`--nice[=adj]`: default 100, |adj| <= 2147483645."""
    if arg is None:
        value = 100
    else:
        from gateway.compat.cnum import strtol

        value = strtol(arg)[0]
    if abs(value) > 0x80000000 - 3:
        raise CompatError.error(f"Invalid --nice value, out of range (+/- {0x80000000 - 3})")
    return value


def c_open_mode(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`--open-mode=append|truncate` (first letter decides)."""
    first = (arg or "")[:1].lower()
    if first == "a":
        return "append"
    if first == "t":
        return "truncate"
    raise CompatError.error("Invalid --open-mode specification")


def c_signal(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`--signal=[{R|B}:]sig[@time]`."""
    spec = parse_signal(_req(arg))
    if spec is None:
        raise CompatError.error("Invalid --signal specification")
    return spec


def c_switches(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`--switches=count[@max-time]`: two fields at once."""
    text = _req(arg)
    count_text, at, wait_text = text.partition("@")
    values: dict[str, Any] = {}
    if at:
        values["switches_wait_s"] = time_str_to_secs(wait_text)
    values["switches"] = parse_int("--switches", count_text, True)
    return Updates(values)


def c_kill_on_invalid_dep(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`--kill-on-invalid-dep=yes|no`."""
    word = _req(arg).lower()
    if word in ("yes", "no"):
        return word == "yes"
    raise CompatError.error("Invalid --kill-on-invalid-dep specification")


def c_get_user_env(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`--get-user-env[=timeout][S|L]`."""
    if arg is None:
        return "0"
    from gateway.compat.cnum import strtol

    _, end = strtol(arg)
    if arg[end:] and arg[end:][0] not in "sSlL":
        raise CompatError.error("Invalid --get-user-env specification")
    return arg


def c_uid_gid(kind: str) -> Converter:
    """`--uid`/`--gid`: only root may use them; names or numbers."""

    def convert(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
        if ctx.uid != 0:
            raise CompatError.error(f"--{kind} only permitted by root user")
        text = _req(arg)
        if text.isdigit():
            if len(text) > 10 or int(text) >= 2**32 - 1:  # uid_t, NO_VAL excluded
                raise CompatError.error(f"Invalid --{kind} specification")
            return int(text)
        try:
            if kind == "uid":
                import pwd

                return pwd.getpwnam(text).pw_uid
            import grp

            return grp.getgrnam(text).gr_gid
        except (KeyError, ValueError):  # (ValueError: a name with a NUL byte)
            raise CompatError.error(f"Invalid --{kind} specification") from None

    return convert


def c_gres(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`--gres`: `help`/`list` print the known GRES; syntax errors are reported at submit."""
    text = _req(arg)
    if text.lower() in ("help", "list"):
        from gateway.compat.options_help import gres_help

        raise _early_exit(gres_help(ctx.gres_names))
    return text


def c_gpus(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`--gpus*`: kept as text; validated with the whole request, like Slurm."""
    return _req(arg)


def c_dependency(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`-d`: kept as text; slurmctld (here, the gateway) validates it at submission."""
    return _req(arg)


def c_verbatim(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """Options Caldera does not interpret: the argument as given (None for flags)."""
    return arg if arg is not None else ""


def c_checked(check: Callable[[str], list[str] | None]) -> Converter:
    """Kept verbatim once `check` finds nothing wrong; else its lines and exit 255."""

    def convert(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
        text = _req(arg)
        lines = check(text)
        if lines is not None:
            raise CompatError(*(Diagnostic(Level.ERROR, line) for line in lines))
        return text

    return convert


def c_distribution(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`-m/--distribution`, checked as `verify_dist_type`."""
    from gateway.compat.option_values import distribution_errors

    return c_checked(distribution_errors)(arg, ctx, draft)


def _one_of_words(option: str, words: tuple[str, ...]) -> Callable[[str], list[str] | None]:
    def check(text: str) -> list[str] | None:
        return None if text.lower() in words else [f"Invalid {option} specification"]

    return check


def c_extra_int(option: str, positive: bool, thread: bool = False) -> Converter:
    """-S/--thread-spec and friends: a C int, kept verbatim (the last one names the field)."""

    def convert(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
        parse_int(option, _req(arg), positive)
        return Updates({"extra:" + option[2:]: _req(arg), "core_spec_thread": thread})

    return convert


def c_wait_all_nodes(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`--wait-all-nodes=0|1`."""
    value = parse_int("--wait-all-nodes", _req(arg), False) & 0xFFFF
    if value > 1:
        raise CompatError.error("Invalid --wait-all-nodes specification")
    return _req(arg)


def c_delay_boot(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`--delay-boot=time`."""
    if time_str_to_secs(_req(arg)) == NO_VAL:
        raise CompatError.error("Invalid --delay-boot specification")
    return _req(arg)


def c_no_kill(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`-k/--no-kill[=off|no|set]`."""
    if arg is None or arg.lower() in ("set", "off", "no"):
        return arg if arg is not None else ""
    raise CompatError.error("Invalid --no-kill specification")


def c_profile(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`--profile`: Slurm looks for known words in the value."""
    from gateway.compat.option_values import profile_is_valid

    if not profile_is_valid(_req(arg)):
        raise CompatError.error(f"invalid --profile={_req(arg)} option")
    return _req(arg)


def c_values(option: str, *words: str) -> Converter:
    """A value from a fixed list (any case), kept verbatim."""
    return c_checked(_one_of_words(option, words))


def _early_exit(text: str) -> Exception:
    from gateway.compat.optypes import EarlyExit

    return EarlyExit(text, 0)


def c_one_of(dest: str, other: str) -> Converter:
    """`-w`/`-F`: setting one forgets the other, as Slurm frees it."""

    def convert(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
        return Updates({dest: _req(arg), other: None})

    return convert


def _resource_range(text: str, what: str) -> tuple[int, int]:
    """`get_resource_arg_range` (fatal flavour): '*' or '' is any; `a[-b]`, k/m suffixes."""
    from gateway.compat.cnum import strtol

    if text in ("", "*") or text.startswith("*"):
        return 1, 2**31 - 1

    def bad() -> CompatError:
        return CompatError.error(f'Invalid numeric value "{text}" for {what}.', exit_code=1)

    def number(pos: int) -> tuple[int, int]:
        value, end = strtol(text, pos)
        mult = {"k": 1024, "K": 1024, "m": 1048576, "M": 1048576}.get(text[end : end + 1])
        if mult:
            value, end = value * mult, end + 1
        return value, end

    low, end = number(0)
    if (end < len(text) and text[end] != "-") or low < 0:
        raise bad()
    if low > 2**31 - 1:
        raise CompatError.error(f"Numeric argument ({low}) to big for {what}.", exit_code=1)
    if end >= len(text):
        return low, low
    high, end = number(end + 1)
    if (end < len(text) and text[end] != "-") or high <= 0:
        raise bad()
    if high > 2**31 - 1:
        raise CompatError.error(f"Numeric argument ({high}) to big for {what}.", exit_code=1)
    return low, high


def c_extra_node_info(arg: str | None, ctx: ParseContext, draft: Draft) -> Any:
    """`-B S[:C[:T]]`: minimum sockets, cores and threads (`*` leaves one unset)."""
    parts = ([*_req(arg).split(":"), "", "", ""])[:3]
    values: dict[str, Any] = {"extra_node_info": True}
    for text, dest, what in zip(
        parts,
        ("sockets_per_node", "cores_per_socket", "threads_per_core"),
        ("first arg of -B", "second arg of -B", "third arg of -B"),
        strict=True,
    ):
        low, high = _resource_range(text[:47], what)
        values[dest] = None if (low, high) == (1, 2**31 - 1) else low
    return Updates(values)
