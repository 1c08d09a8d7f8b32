"""The corpus's sizes shrunk to the test cluster (tests/differential/corpus_adapt.py).

The adapted scripts are read back by Caldera's own sbatch parser (an independent reader of
`#SBATCH` lines): every request must fit the cluster's real nodes, and nothing but sizes
may change.
"""

from __future__ import annotations

import difflib
import re

import pytest

from gateway.compat.errors import CompatError
from gateway.compat.optypes import ParseContext
from gateway.compat.sbatch import parse_sbatch
from gateway.model.jobspec import JobSpec
from tests.differential.corpus_adapt import TEST_CLUSTER, adapt_script
from tests.support.shared_data import CORPUS_DIR

CORPUS = sorted(p for p in CORPUS_DIR.iterdir() if p.name != "SOURCES.tsv")
CTX = ParseContext(cwd="/tmp", max_array_size=100001)
# what may change: these options, and nothing else
SIZE_OPTION = re.compile(
    r"(-p|--partition|-N|--nodes|-n|--ntasks|-c|--cpus-per-task|--n?tasks-per-node|"
    r"--ntasks-per-socket|--mem(-per-[cg]pu)?|--gres|--gpus(-per-(node|task))?|-G|-t|--time|"
    r"--time-min|-a|--array|-C|--constraint|--reservation)\b"
)


def _spec(text: str, name: str) -> JobSpec | None:
    try:
        return parse_sbatch(["sbatch", name], text, {}, CTX).spec
    except CompatError:
        return None


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name[:60])
def test_an_adapted_request_fits_the_clusters_real_nodes(path: object) -> None:
    from pathlib import Path

    assert isinstance(path, Path)
    original = path.read_text(errors="surrogateescape")
    spec = _spec(adapt_script(original), path.name)
    if spec is None:  # refused as it was (not a script, a plugin option): compared as such
        assert _spec(original, path.name) is None
        return
    shape = TEST_CLUSTER
    for part in (spec, *spec.het):
        assert set(part.partitions) <= {shape.partition}
        assert (part.nodes_min or 1) <= shape.nodes
        cpt = part.cpus_per_task or 1
        assert cpt <= shape.cpus
        assert (part.ntasks_per_node or 1) * cpt <= shape.cpus
        nodes = part.nodes_max or part.nodes_min or 4
        assert (part.ntasks or 1) * cpt <= nodes * shape.cpus
        assert (part.mem_per_node_mb or 0) <= shape.mem_mb
        assert (part.mem_per_cpu_mb or 0) * cpt <= shape.mem_mb
        # a --signal lead gets one minute more than itself (corpus_adapt._signal_lead_min)
        lead_min = -(-part.signal.time // 60) if part.signal is not None else 0
        assert part.time_limit is None or part.time_limit <= max(shape.time_min, lead_min + 1)
        assert part.reservation is None
        assert part.constraint is None or set(re.split(r"[&|]", part.constraint)) <= (
            shape.features
        )
        for item in (*part.gres, *part.gpus_per_node, *part.gpus, *part.gpus_per_task):
            assert item.name in shape.gres
            assert item.count <= shape.gpus
        if part.array is not None:
            assert sum(len(range(r.first, r.last + 1, r.step)) for r in part.array.ranges) <= 2


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name[:60])
def test_only_size_options_change(path: object) -> None:
    from pathlib import Path

    assert isinstance(path, Path)
    original = path.read_text(errors="surrogateescape")
    adapted = adapt_script(original)
    removed = [
        ln[1:]
        for ln in difflib.unified_diff(original.splitlines(), adapted.splitlines(), n=0)
        if ln.startswith("-") and not ln.startswith("---")
    ]
    for line in removed:
        assert line.startswith("#SBATCH"), line
        assert SIZE_OPTION.search(line), line
    assert len(adapted.splitlines()) == len(original.splitlines())


@pytest.mark.parametrize(
    ("line", "want"),
    [
        ("#SBATCH --nodes=32", "#SBATCH --nodes=2"),
        ("#SBATCH -N1 -n1 -c48 -t 01:00:00", "#SBATCH -N 1 -n 1 -c 2 -t 1"),
        ("#SBATCH --gres=gpu:v100:4", "#SBATCH --gres=gpu:2"),
        ("#SBATCH --gres=gpu:a100:1", "#SBATCH --gres=gpu:a100:1"),
        ("#SBATCH --gres=craynetwork:2", "# (adapted) SBATCH --gres=craynetwork:2"),
        ("#SBATCH --gpus-per-node=8  # all", "#SBATCH --gpus-per-node=2  # all"),
        ("#SBATCH --array=500-17000:1000%26", "#SBATCH --array=500-1500:1000%26"),
        ("#SBATCH --array=0-1362%1", "#SBATCH --array=0-1%1"),
        ("#SBATCH --mem=320G", "#SBATCH --mem=1000M"),
        ("#SBATCH --mem=0", "#SBATCH --mem=0"),
        ("#SBATCH --mem-per-cpu=4G", "#SBATCH --mem-per-cpu=400M"),
        ("#SBATCH --time=00:00:30", "#SBATCH --time=00:00:30"),
        ("#SBATCH -C knl", "# (adapted) SBATCH -C knl"),
        ("#SBATCH --constraint=a100", "#SBATCH --constraint=a100"),
        ("#SBATCH --reservation=hug", "# (adapted) SBATCH --reservation=hug"),
        ("#SBATCH -A xcore -p cpu -q standby", "#SBATCH -A xcore -p real -q standby"),
        ("#SBATCH --job-name=x --nodes 4", "#SBATCH --job-name=x --nodes=2"),
    ],
)
def test_one_directive(line: str, want: str) -> None:
    assert adapt_script(f"#!/bin/bash\n{line}\necho hi\n") == f"#!/bin/bash\n{want}\necho hi\n"


def test_tasks_follow_the_shrunk_nodes_and_cpus() -> None:
    text = "#!/bin/bash\n#SBATCH -N 30\n#SBATCH --tasks-per-node 40\n#SBATCH -c 14\n#SBATCH -n 97\n"
    assert adapt_script(text).splitlines()[1:] == [
        "#SBATCH -N 2",
        "#SBATCH --tasks-per-node=1",
        "#SBATCH -c 2",
        "#SBATCH -n 2",
    ]


def test_a_signal_lead_keeps_the_warning_past_the_start() -> None:
    text = "#!/bin/bash\n#SBATCH --time=48:00:00\n#SBATCH --signal=B:USR1@90\n"
    assert adapt_script(text).splitlines()[1] == "#SBATCH --time=3"


def test_lines_after_the_first_command_are_not_directives() -> None:
    text = "#!/bin/bash\n#SBATCH -N 8\nhostname\n#SBATCH -N 8\n"
    assert adapt_script(text) == "#!/bin/bash\n#SBATCH -N 2\nhostname\n#SBATCH -N 8\n"
