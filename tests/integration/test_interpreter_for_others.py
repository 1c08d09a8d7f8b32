"""The Slurm commands and in-job srun of a root-made install must run for every user; when
they cannot (a checkout under a private directory), `caldera up` says why instead of users
meeting "Permission denied". Checked for real, as `nobody`."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from containers.interpreter import problem_for_others, shared_python
from gateway.cli.main import _import_roots


def test_this_install_is_usable_by_other_users() -> None:
    assert problem_for_others(shared_python(sys.executable), _import_roots()) is None


def test_a_package_in_a_private_directory_is_reported() -> None:
    private = Path(tempfile.mkdtemp(prefix="caldera-private-"))
    try:
        private.chmod(0o700)
        root = Path(_import_roots()[0])
        shutil.copytree(
            root / "gateway", private / "gateway", ignore=shutil.ignore_patterns("__pycache__")
        )
        problem = problem_for_others(shared_python(sys.executable), [str(private)])
        assert problem is not None
        assert "cannot import Caldera as another user" in problem
        assert "gateway" in problem  # the module that could not be found or read
    finally:
        shutil.rmtree(private, ignore_errors=True)
