"""What deciding a step costs srun inside a local job (containers/step_book.py), as a job
piles up steps: claim + close of one step with 0, 1,000 and 10,000 earlier steps recorded,
against the baseline in the same run, the O_EXCL walk from step 0 that srun used before
(one failed open per earlier step) and a plain O_EXCL create of one file.

    python benchmarks/step_book_bench.py [--steps 200]

Prints one line per size: `earlier=N claim_us=... walk_us=... create_us=... ratio=...`
(ratio: claim over the old walk; below 1 is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from containers.step_alloc import Grant, JobShare, StepAsk
from containers.step_book import Claimed, StepBook

_JOB = JobShare(("node01", "node02"), (2, 2), (200, 200))
_ASK = StepAsk((1,), 1, 1, whole=False, mem_per_cpu=100)


def _fill(where: Path, earlier: int) -> None:
    ended = json.dumps({"state": "COMPLETED", "step_id": "0"})
    for n in range(earlier):
        (where / f"{n}.json").write_text(ended)


def _record(step_id: int, grant: Grant) -> dict[str, object]:
    return {"step_id": str(step_id), "state": "RUNNING"}


def _old_walk(where: Path) -> Path:
    n = 0
    while True:
        path = where / f"{n}.json"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            n += 1
            continue
        os.close(fd)
        return path


def _measure(earlier: int, steps: int) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        book_dir, walk_dir = Path(a), Path(b)
        _fill(book_dir, earlier)
        _fill(walk_dir, earlier)
        book = StepBook(book_dir)
        t0 = time.perf_counter()
        for _ in range(steps):
            got = book.claim(_JOB, _ASK, _record)
            assert isinstance(got, Claimed)
            got.record.write_text(json.dumps({"state": "COMPLETED", "step_id": "x"}))
            got.close()
        claim = (time.perf_counter() - t0) / steps
        t0 = time.perf_counter()
        for _ in range(steps):
            _old_walk(walk_dir)
        walk = (time.perf_counter() - t0) / steps
        t0 = time.perf_counter()
        for n in range(steps):
            os.close(os.open(walk_dir / f"x{n}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        create = (time.perf_counter() - t0) / steps
    return claim, walk, create


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    for earlier in (0, 1000, 10000):
        claim, walk, create = _measure(earlier, args.steps)
        print(
            f"earlier={earlier} claim_us={claim * 1e6:.0f} walk_us={walk * 1e6:.0f} "
            f"create_us={create * 1e6:.1f} ratio={claim / walk:.2f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
