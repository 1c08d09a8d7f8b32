"""sbatch's option passes and precedence, as in Slurm 22.05's `sbatch.c` and `opt.c`.

1. First pass over the command line (hetjob `:` separators removed): only the early
   options act (--help, --usage, --version, -v, -Q, --wrap); it finds the script operand.
2. For each hetjob component: the script's directives, then SBATCH_* variables, then the
   command-line options of that component; a later source overrides an earlier one.
3. Verification derives what sbatch derives (task counts, paths, names).

IO stays outside: the caller reads the script named by the first pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gateway.compat.errors import CompatError, Diagnostic, Level
from gateway.compat.getopt import GetoptError, ParsedArg, getopt_long
from gateway.compat.options import ENV_OPTIONS, OPTIONS
from gateway.compat.options_help import help_text, usage_text, version_text
from gateway.compat.optypes import (
    Arg,
    Draft,
    EarlyExit,
    Option,
    Origin,
    ParseContext,
    Source,
    Updates,
)
from gateway.compat.script import PACKJOB_WARNING, check_script, read_directives, wrap_script
from gateway.compat.verify import verify_component
from gateway.model.jobspec import JobSpec

__all__ = ["CLI_ORIGINS", "FirstPass", "SbatchRequest", "first_pass", "parse_sbatch", "second_pass"]

CLI_ORIGINS = frozenset(Origin)
_RESET_EACH_PASS = frozenset(o.dest for o in OPTIONS if o.reset_each_pass) | {
    "extra_node_info",
    "core_spec_thread",
}


class FirstPass:
    """What sbatch knows before reading the script."""

    __slots__ = (
        "argv",
        "diagnostics",
        "draft",
        "quiet",
        "script_args",
        "script_path",
        "verbose",
        "wrap",
    )

    def __init__(
        self,
        argv: tuple[str, ...],
        script_path: str | None,
        script_args: tuple[str, ...],
        wrap: str | None,
        quiet: int,
        verbose: int,
        diagnostics: tuple[Diagnostic, ...],
        draft: Draft | None = None,
    ) -> None:
        self.argv = argv
        self.script_path = script_path  # None: read standard input (unless wrap)
        self.script_args = script_args
        self.wrap = wrap
        self.quiet = quiet
        self.verbose = verbose
        self.diagnostics = diagnostics  # lines the first pass printed
        # Every command-line option of every component, as this pass set them: sbatch
        # starts the next pass from here, so an option that is not reset between
        # components (--mem, -t, -J...) given to any component also reaches the others
        # unless they set it.
        self.draft = draft if draft is not None else Draft()


class SbatchRequest:
    """The outcome of parsing an sbatch invocation."""

    __slots__ = (
        "ignore_pbs",
        "parsable",
        "quiet",
        "script",
        "spec",
        "test_only",
        "verbose",
        "wait",
        "warnings",
    )

    def __init__(
        self,
        spec: JobSpec,
        script: str,
        parsable: bool = False,
        test_only: bool = False,
        wait: bool = False,
        quiet: int = 0,
        verbose: int = 0,
        ignore_pbs: bool = False,
        warnings: tuple[Diagnostic, ...] = (),
    ) -> None:
        self.spec = spec  # with .het holding components 1..n
        self.script = script
        self.parsable = parsable
        self.test_only = test_only
        self.wait = wait
        self.quiet = quiet
        self.verbose = verbose
        self.ignore_pbs = ignore_pbs
        self.warnings = warnings  # lines sbatch prints (to stderr) on success


def first_pass(argv: Sequence[str], ctx: ParseContext) -> FirstPass:
    """sbatch's `process_options_first_pass`; raises EarlyExit for --help and friends."""
    local = [a for a in argv if a != ":"]
    items, optind = getopt_long(local, CLI_ORIGINS)
    diagnostics: list[Diagnostic] = []
    quiet = verbose = 0
    wrap: str | None = None
    scratch = Draft()  # sbatch 22.05 runs every option's setter in this pass too
    for item in items:
        if isinstance(item, GetoptError):
            # '?' goes to the option table as well: glibc's line, `Try "sbatch --help"...`,
            # exit status 255, before the script is read.
            raise item.error()
        dest = item.option.dest
        if not item.option.early:
            _apply(scratch, item.option, item.arg, Source.CLI, ctx)
            continue
        if dest == "help":
            raise EarlyExit(help_text())
        if dest == "usage":
            raise EarlyExit(usage_text())
        if dest == "version":
            raise EarlyExit(version_text())
        if dest == "quiet":
            quiet += 1
        elif dest == "verbose":
            verbose += 1
        elif dest == "wrap":
            wrap = item.arg
    operands = tuple(local[optind:])
    if operands and wrap is not None:
        raise CompatError.error("Script arguments not permitted with --wrap option", 1)
    script_path = operands[0] if operands else None
    carried = Draft()
    for key, value in scratch.values.items():
        if key not in _RESET_EACH_PASS:
            carried.put(key, value, Source.ENV)  # sbatch marks them as set by the environment
    return FirstPass(
        tuple(argv),
        script_path,
        operands[1:],
        wrap,
        quiet,
        verbose,
        tuple(diagnostics),
        carried,
    )


def _put(draft: Draft, option: Option, value: Any, source: Source) -> None:
    """Store a converter's result: one value, none (clears), or several (Updates)."""
    if isinstance(value, Updates):
        for key, v in value.values.items():
            draft.put(key, v, source)
    else:
        draft.put(option.dest, value, source)


def _apply(
    draft: Draft, option: Option, arg: str | None, source: Source, ctx: ParseContext
) -> None:
    _put(draft, option, option.convert(arg, ctx, draft), source)


def _apply_items(
    draft: Draft, items: Sequence[ParsedArg | GetoptError], source: Source, ctx: ParseContext
) -> None:
    values, sources = draft.values, draft.sources
    for item in items:
        if isinstance(item, GetoptError):
            raise item.error()
        option, arg = item
        if option.early:
            continue  # handled by the first pass, ignored later
        value = option.convert(arg, ctx, draft)
        if value is None or value.__class__ is Updates:
            _put(draft, option, value, source)
        else:  # Draft.put, inlined: this runs for every option
            values[option.dest] = value
            sources[option.dest] = source


def _env_flag_is_set(value: str) -> bool:
    """Slurm's reading of a no-argument option from the environment."""
    if value == "" or value.lower() == "yes":
        return True
    from gateway.compat.cnum import strtol

    number, end = strtol(value)
    return number != 0 and end == len(value)


def _apply_env(draft: Draft, env: Mapping[str, str], ctx: ParseContext) -> None:
    if not env:
        return
    for name, option in ENV_OPTIONS:
        value = env.get(name)
        if value is None:
            continue
        if option.arg is Arg.NONE:
            if not _env_flag_is_set(value):
                draft.put(option.dest, None, Source.ENV)
                continue
            arg: str | None = value if option.dest in ("verbose", "quiet") else None
        elif option.arg is Arg.OPTIONAL and value == "":
            arg = None
        else:
            arg = value
        _apply(draft, option, arg, Source.ENV, ctx)


def _next_component(draft: Draft) -> Draft:
    nxt = draft.copy()
    for key in list(nxt.values):
        if key in _RESET_EACH_PASS:
            nxt.put(key, None, Source.SCRIPT)
    return nxt


def second_pass(
    first: FirstPass, script: str, env: Mapping[str, str], ctx: ParseContext
) -> SbatchRequest:
    """Directives, environment and command line for every component, then verification.

    Lines sbatch prints before failing (the first pass's getopt lines, `#SLURM` and
    `packjob` warnings, verification warnings) are kept in front of the error's lines.
    """
    printed: list[Diagnostic] = list(first.diagnostics)
    try:
        return _second_pass(first, script, env, ctx, printed)
    except CompatError as exc:
        exc.lines = (*printed, *exc.lines)
        raise


def _cli_argv(first: FirstPass) -> list[str]:
    """argv without the script operand and its arguments."""
    cli_argv = list(first.argv[: len(first.argv) - len(first.script_args)])
    if first.script_path is not None and cli_argv and cli_argv[-1] == first.script_path:
        cli_argv.pop()
    return cli_argv


def _second_pass(
    first: FirstPass,
    script: str,
    env: Mapping[str, str],
    ctx: ParseContext,
    printed: list[Diagnostic],
) -> SbatchRequest:
    script_name = first.script_path.rsplit("/", 1)[-1] if first.script_path else "stdin"
    cli_argv = _cli_argv(first)
    specs: list[JobSpec] = []
    refusals: list[CompatError] = []
    drafts: list[Draft] = []
    draft = first.draft.copy()
    component = 0
    pos = 0  # index in cli_argv where this component's options start (argv[0] skipped)
    warned_packjob = False
    while True:
        if component:
            draft = _next_component(draft)
        directives = read_directives(script, script_name, component)
        printed.extend(directives.warnings)
        if directives.packjob and not warned_packjob:
            warned_packjob = True
            printed.append(PACKJOB_WARNING)
        items, optind = getopt_long(directives.argv, directives.origins)
        _apply_items(draft, items, Source.SCRIPT, ctx)
        if optind < len(directives.argv):
            raise CompatError.error(
                f"Invalid directive found in batch script: {directives.argv[optind]}"
            )
        _apply_env(draft, env, ctx)
        items, optind = getopt_long(cli_argv, CLI_ORIGINS, start=pos + 1)
        _apply_items(draft, items, Source.CLI, ctx)
        drafts.append(draft)
        more_cli = optind < len(cli_argv) and cli_argv[optind] == ":"
        is_het = component > 0 or more_cli or directives.more_components
        verified = verify_component(draft, ctx, script_name, first, is_het=is_het)
        printed.extend(verified.warnings)
        specs.append(verified.spec)
        if verified.refusal is not None:
            refusals.append(verified.refusal)
        if more_cli:
            pos = optind
        elif not directives.more_components:
            break
        # else: like sbatch, the same command-line options apply to the next component
        component += 1
    if refusals:
        raise refusals[0]
    leader = specs[0]
    if len(specs) > 1:
        leader = replace(leader, het=tuple(specs[1:]))
    flags = drafts[0]
    return SbatchRequest(
        spec=leader,
        script=script,
        parsable=bool(flags.get("parsable", False)),
        test_only=bool(flags.get("test_only", False)),
        wait=bool(flags.get("wait", False)),
        quiet=first.quiet,
        verbose=first.verbose + int(flags.get("verbose", 0)),
        ignore_pbs=bool(flags.get("ignore_pbs", False)),
        warnings=tuple(printed),
    )


def parse_sbatch(
    argv: Sequence[str],
    script_text: str | None,
    env: Mapping[str, str],
    ctx: ParseContext,
) -> SbatchRequest:
    """The whole sbatch parse, for a script already read (or None with --wrap)."""
    first = first_pass(argv, ctx)
    if first.wrap is not None:
        script = wrap_script(first.wrap)
    else:
        if script_text is None:
            raise CompatError.error("Batch script is empty!", 1)
        check_script(script_text)
        script = script_text
    return second_pass(first, script, env, ctx)


def render_diagnostics(lines: Sequence[Diagnostic], prog: str = "sbatch") -> str:
    """Lines as the program prints them."""
    return "".join(d.render(prog) + "\n" for d in lines)


_ = Level  # re-exported type used by callers through errors
