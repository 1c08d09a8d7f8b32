"""The `proctrack` setting of caldera.toml chooses the local backend's process tracker
(containers.proctrack), the choice is logged at start, and a name that is unknown stops the
start instead of falling back silently. Real cgroups where the machine has them.
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.backend import LocalBackend
from gateway.control.backends import make_backends
from gateway.control.config import load_config


@pytest.fixture
def home() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="h7-proctrack-config-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _local(home: Path, text: str) -> LocalBackend:
    (home / "caldera.toml").write_text(text)
    config = load_config(home)
    backends, _ = make_backends(config)
    local = backends[config.cluster_name]
    assert isinstance(local, LocalBackend)
    return local


def test_the_configured_tracker_is_used_and_logged(
    home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="caldera.local")
    local = _local(home, 'proctrack = "session"\n')
    assert local.tracker.kind == "session"
    assert any(
        "process tracking session (asked: session)" in r.getMessage() for r in caplog.records
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="cgroups are root's")
def test_auto_picks_a_cgroup_tracker_as_root(home: Path) -> None:
    local = _local(home, "")
    assert load_config(home).proctrack == "auto"
    assert local.tracker.kind in ("cgroup2", "freezer")  # this machine has cgroups


def test_an_unknown_tracker_stops_the_start(home: Path) -> None:
    with pytest.raises(ValueError, match="unknown process tracking 'cgroup3'"):
        _local(home, 'proctrack = "cgroup3"\n')
