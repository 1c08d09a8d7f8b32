"""squeue lines kept per job record and format, for the gateway that renders every call.

A record is immutable (a change replaces it), and most of a line's fields are functions of
the record and the site alone; formatting them was ~2/3 of rendering 10,000 jobs. A line
is kept while its row shows the same record, unless a field of the format reads the clock
(`SqueueField.clock`): time used and left only for jobs that are not pending, end and
pending times always.
"""

from __future__ import annotations

from collections.abc import Sequence

from gateway.compat.job_fields import SiteDefaults
from gateway.compat.squeue_fmt import render_line
from gateway.compat.squeue_fmt_fields import FormatItem, SqueueRow
from gateway.model.job import Job
from gateway.model.state import JobState

__all__ = ["LineCache"]

_FORMATS = 16  # formats kept (users may ask for any number of distinct ones)

_Key = tuple[int, int | None, str | None]  # job id, task shown, pending task list


class _Lines:
    """The kept lines of one format."""

    def __init__(self, items: Sequence[FormatItem]) -> None:
        clocks = {i.field.clock for i in items if i.field is not None}
        self.never = "any" in clocks  # no line of this format may be kept
        self.pending_only = "run" in clocks
        self.lines: dict[_Key, tuple[Job, str]] = {}


class LineCache:
    """Rendered lines by format, then by row; valid while the site defaults stay."""

    def __init__(self) -> None:
        self._site: SiteDefaults | None = None
        self._formats: dict[tuple[FormatItem, ...], _Lines] = {}

    def lines_for(self, items: Sequence[FormatItem], site: SiteDefaults) -> _Lines:
        """The store of `items`' lines, emptied when the site defaults changed."""
        if site != self._site:
            self._site, self._formats = site, {}
        key = tuple(items)
        found = self._formats.pop(key, None)  # re-inserted: the dict's order is recency
        if found is None:
            found = _Lines(items)
            if len(self._formats) >= _FORMATS:
                del self._formats[next(iter(self._formats))]
        self._formats[key] = found
        return found

    @staticmethod
    def line(store: _Lines, items: Sequence[FormatItem], row: SqueueRow) -> str:
        """`render_line(items, row)`, from the store when the row's record is unchanged."""
        job = row.job
        if store.never or (store.pending_only and job.state is not JobState.PENDING):
            return render_line(items, row)
        key = (job.job_id, row.task_id, row.task_str)
        hit = store.lines.get(key)
        if hit is None or hit[0] is not job:
            hit = store.lines[key] = (job, render_line(items, row))
        return hit[1]

    @staticmethod
    def trim(store: _Lines, shown: int) -> None:
        """Forget lines of records no longer shown once the store outgrows what was shown."""
        if len(store.lines) > 2 * shown + 1024:
            store.lines.clear()
