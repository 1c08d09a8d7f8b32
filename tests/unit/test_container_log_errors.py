"""Podman can answer a log stream of a container that has just exited with its error
document instead of the output (seen in CI: the job's file held the error); such a chunk is
recognised so that it is never written as the job's output (containers/docker_runner.py)."""

from __future__ import annotations

from containers.docker_runner import _engine_error

SEEN = (
    b':"no such process","message":"failed to obtain logs for Container '
    b"'765561281f6211e6aa26059e6c6ad301dfd25eac854663144bf872d9e6943c8b': read "
    b'/proc/3734/cgroup: no such process","response":500}\n'
)


def test_the_engines_error_document_is_recognised_even_cut_by_the_frame_reader() -> None:
    assert _engine_error(SEEN)
    assert _engine_error(b'{"cause"' + SEEN)


def test_ordinary_output_is_not_an_error() -> None:
    assert not _engine_error(b"job=1 cwd=/tmp/work\n")
    assert not _engine_error(b'{"response": 500}\n')  # a job printing JSON of its own
    assert not _engine_error(b"")
