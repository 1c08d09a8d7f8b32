"""Throughput of sbatch parsing over the shared corpus, and the compat layer's import time.

Run: `python benchmarks/bench_compat.py [--seconds 10] [--imports 20]`

* Parsing: every script of `../shared/data/sbatch-corpus` through `parse_sbatch` (as
  `sbatch <script>`: first pass, script checks, #SBATCH reading, SBATCH_* overlay,
  verification into a JobSpec, refusals included), over and over on one core for the given
  time. Reported per CPU second of this process (`time.process_time`, what one core does
  when the machine is shared) and per wall second. "warm" keeps the small per-value caches
  (option names, times, sizes, GRES, arrays) between passes as a long-running gateway
  does; "cold" clears them before every pass over the corpus.
* Import: `import gateway.compat.sbatch` in fresh interpreters (what a command pays at
  start-up): the CPU and wall time of the import statement itself, and the wall time of
  `python -c 'import gateway.compat.sbatch'` minus `python -c pass`; medians.
* Host speed: the time of `sum(range(1000))`, to compare figures taken on other machines.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
import timeit
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gateway.compat import arrays, duration, getopt, gres, quantity, verify  # noqa: E402
from gateway.compat.errors import CompatError  # noqa: E402
from gateway.compat.optypes import EarlyExit, ParseContext  # noqa: E402
from gateway.compat.sbatch import parse_sbatch  # noqa: E402

CORPUS = (
    Path(os.environ.get("CALDERA_SHARED_DATA", str(REPO.parent / "shared" / "data")))
    / "sbatch-corpus"
)
CONTEXT = ParseContext(
    cwd="/home/user/work",
    now=time.time(),
    max_array_size=100_001,
    gres_names=("gpu", "craynetwork", "qpu"),
)
_CACHES: list[Callable[[], None]] = [
    getopt._candidates.cache_clear,
    getopt._long_word.cache_clear,
    duration.time_str_to_secs.cache_clear,
    quantity.str_to_mbytes.cache_clear,
    quantity.parse_node_count.cache_clear,
    quantity.parse_signal.cache_clear,
    quantity.parse_mail_type.cache_clear,
    gres.parse_tres_item.cache_clear,
    arrays.parse_array.cache_clear,
    verify._checked_gres.cache_clear,
]


def corpus() -> list[tuple[str, str]]:
    """(path, text) of every corpus script."""
    files = sorted(p for p in CORPUS.iterdir() if p.is_file() and p.name != "SOURCES.tsv")
    return [(str(p), p.read_text(encoding="utf-8", errors="surrogateescape")) for p in files]


def parse_all(scripts: list[tuple[str, str]]) -> int:
    """One pass over the corpus; returns the number of refused scripts."""
    refused = 0
    for path, text in scripts:
        try:
            parse_sbatch(["sbatch", path], text, {}, CONTEXT)
        except (CompatError, EarlyExit):
            refused += 1
    return refused


def throughput(scripts: list[tuple[str, str]], seconds: float, cold: bool) -> tuple[float, float]:
    """Scripts per CPU second and per wall second."""
    parse_all(scripts)  # warm up imports and code paths
    done = 0
    cpu0, wall0 = time.process_time(), time.perf_counter()
    while time.process_time() - cpu0 < seconds:
        if cold:
            for clear in _CACHES:
                clear()
        parse_all(scripts)
        done += len(scripts)
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    return done / cpu, done / wall


def _run(code: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    return out.stdout


def import_times(runs: int) -> dict[str, float]:
    """Medians, in milliseconds, over `runs` fresh interpreters."""
    code = (
        "import time; c=time.process_time(); w=time.perf_counter(); "
        "import gateway.compat.sbatch; "
        "print(time.process_time()-c, time.perf_counter()-w)"
    )
    inside = [tuple(map(float, _run(code).split())) for _ in range(runs)]

    def wall(code: str) -> float:
        start = time.perf_counter()
        _run(code)
        return time.perf_counter() - start

    bare = [wall("pass") for _ in range(runs)]
    full = [wall("import gateway.compat.sbatch") for _ in range(runs)]
    return {
        "import statement, CPU": statistics.median(c for c, _ in inside) * 1000,
        "import statement, wall": statistics.median(w for _, w in inside) * 1000,
        "process with import minus bare process, wall": (
            statistics.median(full) - statistics.median(bare)
        )
        * 1000,
        "bare interpreter start, wall": statistics.median(bare) * 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="CPU seconds per figure")
    parser.add_argument("--imports", type=int, default=20, help="fresh interpreters to time")
    args = parser.parse_args()
    scripts = corpus()
    refused = parse_all(scripts)
    ref = min(timeit.repeat("sum(range(1000))", number=2000, repeat=5)) / 2000 * 1e6
    print(f"host: sum(range(1000)) = {ref:.1f} us; load average {os.getloadavg()[0]:.1f}")
    print(f"corpus: {len(scripts)} scripts ({refused} refused, as real sbatch refuses them)")
    for label, cold in (("warm", False), ("cold", True)):
        per_cpu, per_wall = throughput(scripts, args.seconds, cold)
        print(
            f"parse ({label} caches): {per_cpu:,.0f} scripts per CPU second, "
            f"{per_wall:,.0f} per wall second"
        )
    for name, ms in import_times(args.imports).items():
        print(f"import gateway.compat.sbatch, {name}: {ms:.1f} ms (median of {args.imports})")


if __name__ == "__main__":
    main()
