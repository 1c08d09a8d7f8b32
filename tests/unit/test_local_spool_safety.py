"""The spool's privilege rules without a job: what root writes, reads and believes."""

from __future__ import annotations

import os
import stat
import threading
from pathlib import Path

import pytest

from containers.spool import open_dir, parse_step, read_json, read_owned_json, write_json
from gateway.compat.job_env import submit_umask


def test_write_json_sets_the_mode_on_the_descriptor_and_refuses_shared_directories(
    tmp_path: Path,
) -> None:
    tmp_path.chmod(0o755)
    write_json(tmp_path / "a.json", {"v": 1}, mode=0o640)
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o640
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(PermissionError):
        write_json(shared / "b.json", {"v": 1})
    assert list(shared.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="needs a directory of another uid")
def test_write_json_refuses_a_directory_of_another_user(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 1001, 1001)
    with pytest.raises(PermissionError):
        write_json(theirs / "b.json", {"v": 1})


def test_readers_follow_no_symlink_and_never_block_on_a_fifo(tmp_path: Path) -> None:
    (tmp_path / "real.json").write_text('{"v": 1}')
    (tmp_path / "link.json").symlink_to(tmp_path / "real.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "big.json").write_text(" " * 300_000 + "{}")
    (tmp_path / "deep.json").write_text("[" * 100_000)
    (tmp_path / "nan.json").write_text('{"v": NaN}')
    result: list[object] = []
    reader = threading.Thread(
        target=lambda: result.extend(
            read_json(tmp_path / n, 256 * 1024)
            for n in ("link.json", "zero.json", "fifo.json", "big.json", "deep.json", "nan.json")
        ),
        daemon=True,
    )
    reader.start()
    reader.join(5)
    assert result == [None] * 6
    fd = open_dir(tmp_path)
    assert fd is not None
    try:
        me = os.geteuid()
        assert read_owned_json(fd, "real.json", me) == {"v": 1}
        assert read_owned_json(fd, "real.json", me + 1) is None
        assert read_owned_json(fd, "link.json", me) is None
        assert read_owned_json(fd, "../real.json", me) is None
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "changes",
    [
        {"exit_code": 1 << 70},
        {"exit_code": "3"},
        {"exit_code": 1.5},
        {"start_time": 1e300},
        {"state": "PENDING"},
        {"name": "x" * 5000},
        {"nodes": "n1"},
        {"extra": {"k": 1}},
        {"step_id": "7"},
    ],
)
def test_a_step_record_with_anything_off_is_ignored(changes: dict[str, object]) -> None:
    good: dict[str, object] = {"step_id": "3", "state": "COMPLETED", "exit_code": 256}
    step = parse_step(good, 9, "3")
    assert step is not None
    assert step.exit_code == 256
    assert parse_step({**good, **changes}, 9, "3") is None


@pytest.mark.parametrize(
    ("value", "mask"),
    [("0077", 0o077), ("0022", 0o022), ("0", 0), ("0777", 0o777), ("8", 0o022), ("", 0o022)],
)
def test_the_submitters_umask_is_read_as_slurmstepd_reads_it(value: str, mask: int) -> None:
    env = {"SLURM_UMASK": value} if value else {}
    assert submit_umask(env) == mask
