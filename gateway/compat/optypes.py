"""The shapes shared by the option table and its parsers: Option, Arg, Draft, ParseContext."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = [
    "Arg",
    "Draft",
    "EarlyExit",
    "Option",
    "Origin",
    "ParseContext",
    "Section",
    "Source",
    "Updates",
]


class Arg(Enum):
    """getopt's has_arg."""

    NONE = 0
    REQUIRED = 1
    OPTIONAL = 2


class Origin(Enum):
    """Who defines an option: Slurm itself, a common SPANK plugin, or Caldera."""

    SLURM = "slurm"
    PLUGIN = "plugin"  # pyxis / shifter options real scripts carry
    CALDERA = "caldera"  # read from #CALDERA lines (and accepted on Caldera's command line)


class Source(Enum):
    """Where a value came from; Slurm's precedence is CLI > ENV > SCRIPT."""

    SCRIPT = 1
    ENV = 2
    CLI = 3


class Section(Enum):
    """Groups of `sbatch --help`, in Slurm's order."""

    PARALLEL = "Parallel run options"
    CONSTRAINT = "Constraint options"
    CONSUMABLE = "Consumable resources related options"
    AFFINITY = "Affinity/Multi-core options"
    GPU = "GPU scheduling options"
    CONTAINER = "Container options (pyxis, shifter and Caldera)"
    HELP = "Help options"
    OTHER = "Other options"


@dataclass(frozen=True, slots=True)
class ParseContext:
    """What parsing may depend on besides its input: the caller and the clock."""

    cwd: str
    uid: int = 0
    now: float = 0.0
    user: str = "root"
    prog: str = "sbatch"
    max_array_size: int = 1001
    read_file: Callable[[str], str] | None = None  # for -F/--nodefile and hostfiles
    gres_names: tuple[str, ...] | None = None  # the site's GresTypes (None: accept any)
    allow_spec_resources: bool = False  # slurm.conf AllowSpecResourcesUsage


class EarlyExit(Exception):
    """--help, --usage, --version, --gres=help: print `stdout` and exit with `code`."""

    def __init__(self, stdout: str, code: int = 0) -> None:
        super().__init__(stdout)
        self.stdout = stdout
        self.code = code


class Updates:
    """A converter result that sets (or, with value None, clears) several fields at once."""

    __slots__ = ("values",)

    def __init__(self, values: Mapping[str, Any]) -> None:
        self.values = values


class Draft:
    """The option values of one job component while passes are applied."""

    __slots__ = ("sources", "values")

    def __init__(
        self, values: dict[str, Any] | None = None, sources: dict[str, Source] | None = None
    ) -> None:
        self.values: dict[str, Any] = values if values is not None else {}
        self.sources: dict[str, Source] = sources if sources is not None else {}

    def get(self, key: str, default: Any = None) -> Any:
        """The current value of a field."""
        return self.values.get(key, default)

    def isset(self, key: str) -> bool:
        """Whether a field has a value."""
        return key in self.values

    def set_by_cli(self, key: str) -> bool:
        """Slurm's `slurm_option_set_by_cli`: set, and not by the environment."""
        return key in self.values and self.sources.get(key) is not Source.ENV

    def set_by_env(self, key: str) -> bool:
        """Slurm's `slurm_option_set_by_env`."""
        return key in self.values and self.sources.get(key) is Source.ENV

    def put(self, key: str, value: Any, source: Source) -> None:
        """Set a field, or clear it when value is None."""
        if value is None:
            self.values.pop(key, None)
            self.sources.pop(key, None)
        else:
            self.values[key] = value
            self.sources[key] = source

    def copy(self) -> Draft:
        """An independent copy (hetjob components start from the previous one)."""
        return Draft(dict(self.values), dict(self.sources))


Converter = Callable[[str | None, ParseContext, Draft], Any]


class Option:
    """One sbatch option, declared once; drives argv, #SBATCH, SBATCH_* and --help."""

    __slots__ = (
        "arg",
        "convert",
        "dest",
        "early",
        "env",
        "help",
        "long",
        "metavar",
        "origin",
        "reset_each_pass",
        "section",
        "short",
    )

    def __init__(
        self,
        long: str | None,
        short: str | None,
        arg: Arg,
        dest: str,
        convert: Converter,
        help: str,
        env: tuple[str, ...] = (),
        metavar: str = "",
        section: Section = Section.PARALLEL,
        origin: Origin = Origin.SLURM,
        early: bool = False,
        reset_each_pass: bool = False,
    ) -> None:
        self.long = long
        self.short = short
        self.arg = arg
        self.dest = dest
        self.convert = convert
        self.help = help
        self.env = env
        self.metavar = metavar
        self.section = section
        self.origin = origin
        self.early = early  # handled in sbatch's first pass only
        self.reset_each_pass = reset_each_pass  # not inherited by the next hetjob component

    def __repr__(self) -> str:
        return f"Option(--{self.long or ''} -> {self.dest})"

    def flag_text(self) -> str:
        """The left column of --help: `  -N, --nodes=N`."""
        short = f"-{self.short}, " if self.short else "    "
        long = f"--{self.long}" if self.long else ""
        if self.arg is Arg.REQUIRED:
            long += f"={self.metavar or 'value'}"
        elif self.arg is Arg.OPTIONAL:
            long += f"[={self.metavar or 'value'}]"
        return f"  {short}{long}"
