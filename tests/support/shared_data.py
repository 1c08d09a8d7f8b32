"""Where the shared real data lives (`../shared/data` beside the repository, or
$CALDERA_SHARED_DATA): the sbatch corpus, the SWF traces, the Slurm simulator's micro
cluster. Tests read it in place and never copy it into the repository."""

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = Path(os.environ.get("CALDERA_SHARED_DATA") or REPO_ROOT.parent / "shared" / "data")
CORPUS_DIR = SHARED_DATA / "sbatch-corpus"
MICRO_TOPOLOGY = SHARED_DATA / "slurm-sim-micro" / "topology.conf"
