"""The dashboard reads a job's output with the job user's ids, never as root: a file the
user owns, behind a directory only root may enter, stays unread (root could read it)."""

from __future__ import annotations

import os
import pwd
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from gateway.dashboard.tail import tail_as_owner
from tests.support.builders import make_job

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="switches to the job user's ids")


@pytest.fixture
def base() -> Iterator[Path]:
    """Outside pytest's private (0700) temporary tree, which the job user cannot enter."""
    path = Path(tempfile.mkdtemp(prefix="caldera-tail-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_the_tail_is_read_as_the_job_user(base: Path) -> None:
    tester = pwd.getpwnam("tester")
    built = make_job(5).user(tester.pw_uid).build()
    job = replace(built, user="tester", gid=tester.pw_gid)
    tmp_path = base
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o755)
    tmp_path.chmod(0o755)
    readable = open_dir / "out.txt"
    readable.write_text("line-1\nline-2\n")
    os.chown(readable, tester.pw_uid, tester.pw_gid)
    assert tail_as_owner(str(readable), job) == "line-1\nline-2\n"
    hidden_dir = tmp_path / "roots"
    hidden_dir.mkdir()
    hidden_dir.chmod(0o700)  # root's: the job user cannot enter it
    hidden = hidden_dir / "out.txt"
    hidden.write_text("secret\n")
    os.chown(hidden, tester.pw_uid, tester.pw_gid)
    assert hidden.read_text() == "secret\n"  # root can
    assert tail_as_owner(str(hidden), job) is None  # the job's user cannot, so it is not shown
