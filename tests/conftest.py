"""Session fixtures shared by every test package (real Slurm cluster, real Kubernetes), and
Hypothesis profiles: `ci` (testenv/test.sh) replays the same examples on every run so that
a red build always means a change broke something; local runs keep exploring new ones."""

import os

from hypothesis import settings

pytest_plugins = [
    "tests.support.slurm_stack",
    "tests.support.k8s_env",
    "tests.support.kubelet_env",
    "tests.support.gateway_env",
]

settings.register_profile("ci", derandomize=True, print_blob=True)
settings.load_profile(os.environ.get("CALDERA_HYPOTHESIS_PROFILE", "default"))
