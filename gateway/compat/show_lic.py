"""`scontrol show licenses [name]` as scontrol prints it (info_lics.c): sorted by name,
one record per licence, nothing for an unknown name, a sentence when none is configured."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.scheduler.licenses import LicenseUse

__all__ = ["show_licenses"]


def show_licenses(uses: Sequence[LicenseUse], name: str | None, *, one_liner: bool) -> str:
    """The text of `scontrol [-o] show licenses [name]` (Reserved: no reservations hold
    licences here)."""
    if not uses:
        return "No licenses configured in Slurm.\n"
    sep = " " if one_liner else "\n    "
    out = [
        f"LicenseName={u.name}{sep}Total={u.total} Used={u.used} Free={u.total - u.used} "
        "Reserved=0 Remote=no\n"
        for u in sorted(uses, key=lambda u: u.name.encode())
        if name is None or u.name == name
    ]
    return "".join(out[:1] if name is not None else out)
