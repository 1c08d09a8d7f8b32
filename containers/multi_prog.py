"""srun's `--multi-prog` file: which program each task of a step runs.

Standard library only: the local runner's srun (containers/srun.py) and the srun inside a
Kubernetes gang's pods (k8s_bridge/pod_launcher.py, which launch.py ships this file to)
read it with the same rules.
"""

from __future__ import annotations

import shlex

__all__ = ["MultiProgError", "multi_prog"]


class MultiProgError(Exception):
    """A --multi-prog file srun cannot use."""


def multi_prog(path: str, ntasks: int) -> list[list[str]]:
    """--multi-prog's file: `RANKS PROGRAM ARGS...` lines (`0`, `1-3,5`, `*`), with %t (the
    task) and %o (its offset within the line's ranks) replaced; the first line naming a
    task wins."""
    commands: list[list[str] | None] = [None] * ntasks
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.readlines()
    except OSError as exc:
        raise MultiProgError(f"{path}: {exc.strerror}") from exc
    for number, raw in enumerate(lines, 1):
        try:
            words = shlex.split(raw, comments=True)
        except ValueError as exc:
            raise MultiProgError(f"{path}: line {number}: {exc}") from exc
        if not words:
            continue
        if len(words) < 2:
            raise MultiProgError(f"{path}: line {number}: no program for tasks {words[0]}")
        ranks = range(ntasks) if words[0] == "*" else _rank_list(words[0], path, number)
        for offset, rank in enumerate(ranks):
            if rank < ntasks and commands[rank] is None:
                commands[rank] = [
                    w.replace("%t", str(rank)).replace("%o", str(offset)) for w in words[1:]
                ]
    missing = [str(r) for r, c in enumerate(commands) if c is None]
    if missing:
        raise MultiProgError(f"{path}: no program for task(s) {','.join(missing)}")
    return [c for c in commands if c is not None]


def _rank_list(text: str, path: str, number: int) -> list[int]:
    ranks: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        if not low.isdigit() or (high and not high.isdigit()):
            raise MultiProgError(f"{path}: line {number}: invalid task range {text}")
        ranks.extend(range(int(low), int(high or low) + 1))
    return ranks
