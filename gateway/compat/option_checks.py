"""sbatch's checks of option combinations before a job is built (Slurm 22.05).

`validate_options_salloc_sbatch_srun` and `validate_hint_option`/`verify_hint`: options
that exclude each other (--ntasks-per-gpu, the memory options, -S/--thread-spec), which
of them wins when one comes from the command line or script and another from the
environment, and the socket/core/thread layout a --hint stands for. They change the draft
in place, or raise Slurm's fatal error.
"""

from __future__ import annotations

import re

from gateway.compat.errors import CompatError, Diagnostic, Level
from gateway.compat.optypes import Draft, ParseContext, Source

__all__ = ["check_options"]


def check_options(d: Draft, ctx: ParseContext, warnings: list[Diagnostic]) -> None:
    """Every check, in sbatch's order; warnings sbatch prints are appended to `warnings`."""
    _validate_ntasks_per_gpu(d)
    _validate_spec_cores(d, ctx, warnings)
    _validate_memory(d)
    _apply_hint(d)


def _fatal(text: str) -> CompatError:
    return CompatError.fatal(text)


def _validate_ntasks_per_gpu(d: Draft) -> None:
    if not d.isset("ntasks_per_gpu"):
        return
    for dest, cli, env in (
        ("gpus_per_task", "--gpus-per-task", "SLURM_GPUS_PER_TASK"),
        ("gpus_per_socket", "--gpus-per-socket", "SLURM_GPUS_PER_SOCKET"),
        ("ntasks_per_node", "--ntasks-per-node", "SLURM_NTASKS_PER_NODE"),
    ):
        if d.set_by_cli(dest):
            raise _fatal(
                f"{cli} is mutually exclusive with --ntasks-per-gpu and SLURM_NTASKS_PER_GPU"
            )
        if d.set_by_env(dest):
            raise _fatal(
                f"{env} is mutually exclusive with --ntasks-per-gpu and SLURM_NTASKS_PER_GPU"
            )


def _validate_spec_cores(d: Draft, ctx: ParseContext, warnings: list[Diagnostic]) -> None:
    """`_validate_spec_cores_options`: -S and --thread-spec."""
    core, thread = "extra:core-spec", "extra:thread-spec"
    if not (d.isset(core) or d.isset(thread)):
        return
    if d.set_by_cli(core) and d.set_by_cli(thread):
        raise _fatal("-S/--core-spec and --thred-spec options are mutually exclusive")
    if (
        d.set_by_env(core)
        and d.set_by_env(thread)
        and not (d.set_by_cli(core) or d.set_by_cli(thread))
    ):
        raise _fatal(
            "Both --core-spec and --thread-spec set using environment variables. Those "
            "options are mutually exclusive."
        )
    if not ctx.allow_spec_resources:
        # both options set Slurm's one core_spec field; the last one names the message
        name = "--thread-spec" if d.get("core_spec_thread") else "-S"
        warnings.append(
            Diagnostic(
                Level.ERROR,
                f"Ignoring {name} since it's not allowed by configuration "
                "(AllowSpecResourcesUsage = No)",
            )
        )


_MEMORY_KEYS = ("mem_per_node_mb", "mem_per_cpu_mb", "mem_per_gpu_mb")


def _validate_memory(d: Draft) -> None:
    keys = _MEMORY_KEYS
    if sum(k in d.values for k in keys) < 2:
        return  # nothing can clash
    by_cli = [k for k in keys if d.set_by_cli(k)]
    if len(by_cli) > 1:
        raise _fatal("--mem, --mem-per-cpu, and --mem-per-gpu are mutually exclusive.")
    if by_cli:
        for k in keys:
            if k != by_cli[0]:
                d.put(k, None, Source.CLI)
    elif sum(d.set_by_env(k) for k in keys) > 1:
        raise _fatal(
            "SLURM_MEM_PER_CPU, SLURM_MEM_PER_GPU, and SLURM_MEM_PER_NODE are mutually exclusive."
        )


_HINT_KEYS = ("ntasks_per_core", "threads_per_core", "extra_node_info")


def _apply_hint(d: Draft) -> None:
    """`validate_hint_option` then `verify_hint`."""
    if not d.isset("hint"):
        return
    if d.set_by_cli("hint"):
        if any(d.set_by_cli(k) for k in _HINT_KEYS):
            d.put("hint", None, Source.CLI)
            return
        for k in (
            "ntasks_per_core",
            "threads_per_core",
            "extra_node_info",
            "sockets_per_node",
            "cores_per_socket",
        ):
            d.put(k, None, Source.CLI)
    elif any(d.set_by_cli(k) for k in _HINT_KEYS) or any(d.set_by_env(k) for k in _HINT_KEYS):
        d.put("hint", None, Source.CLI)
        return
    text: str = d.get("hint")
    for tok in _hint_tokens(text):
        word = tok.lower()
        if word == "compute_bound":
            d.put("sockets_per_node", None, Source.CLI)
            d.put("cores_per_socket", None, Source.CLI)
            d.put("threads_per_core", 1, Source.CLI)
        elif word == "memory_bound":
            d.put("cores_per_socket", 1, Source.CLI)
            d.put("threads_per_core", 1, Source.CLI)
        elif word == "multithread":
            d.put("threads_per_core", None, Source.CLI)
            d.put("ntasks_per_core", 0xFFFF, Source.CLI)
        elif word == "nomultithread":
            d.put("threads_per_core", 1, Source.CLI)
        else:
            raise CompatError.error(
                f'unrecognized --hint argument "{tok}", see --hint=help', exit_code=1
            )


_HINT_SEPARATOR = re.compile(r",(?![0-9])")


def _hint_tokens(text: str) -> list[str]:
    """Commas not followed by a digit separate hints (Slurm keeps `map_cpu:1,2` together)."""
    return _HINT_SEPARATOR.split(text)
