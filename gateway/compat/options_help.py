"""`sbatch --help`, `--usage` and `--version`, generated from the option table."""

from __future__ import annotations

from gateway.compat.optypes import Origin, Section

__all__ = ["SLURM_COMPAT_VERSION", "gres_help", "help_text", "usage_text", "version_text"]

SLURM_COMPAT_VERSION = "22.05.8"  # the Slurm release whose behaviour Caldera reproduces
# the package name its `--version` prints: Debian's build (the test clusters') says slurm-wlm
SLURM_PACKAGE = "slurm-wlm"


def help_text() -> str:
    """The help page: one section per Section, options in table order."""
    from gateway.compat.options import OPTIONS

    out = [
        "Usage: sbatch [OPTIONS(0)...] [ : [OPTIONS(N)...]] script(0) [args(0)...]",
        "",
    ]
    for section in Section:
        rows = [o for o in OPTIONS if o.section is section and o.long]
        if not rows:
            continue
        out.append(f"{section.value}:")
        for o in rows:
            flag = o.flag_text()
            note = o.help
            if len(flag) >= 30:
                out.append(flag)
                out.append(" " * 30 + note)
            else:
                out.append(f"{flag:<30}{note}")
        out.append("")
    out.append(
        "Options marked [Caldera] are also read from '#CALDERA' lines of the script; real "
        "Slurm treats those lines as comments."
    )
    return "\n".join(out) + "\n"


def usage_text() -> str:
    """The brief usage line list."""
    from gateway.compat.options import OPTIONS

    words = []
    for o in OPTIONS:
        if o.long and o.origin is Origin.SLURM and not o.early:
            words.append(f"[--{o.long}{'=' + (o.metavar or 'value') if o.arg.value else ''}]")
    lines = ["Usage: sbatch"]
    for word in words:
        if len(lines[-1]) + len(word) + 1 > 78:
            lines.append("             ")
        lines[-1] += " " + word
    lines.append("              executable [args...]")
    return "\n".join(lines) + "\n"


def version_text() -> str:
    """`sbatch --version` (every command's): the Slurm release Caldera is compatible with."""
    return f"{SLURM_PACKAGE} {SLURM_COMPAT_VERSION}\n"


def gres_help(names: tuple[str, ...] | None = None) -> str:
    """`--gres=help`: the site's generic resources (GresTypes), `gpu` when unknown."""
    lines = "".join(f"{name}[[:type]:count]\n" for name in (names or ("gpu",)))
    return "Valid gres options are:\n" + lines
