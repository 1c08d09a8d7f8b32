"""The batch script in a container, through the Docker API (Docker, or Podman's compatible socket).

The container gets the job's environment, its uid:gid and groups, its working directory
bind-mounted at the same path, the script mounted read-only, the requested mounts
(`--container-mounts=SRC[:DST[:ro]]`) and, when the job has one, a memory limit. Its output
is copied as it comes into the job's files, opened by the supervisor as the user. Exit
statuses above 128 are read as death by signal (status - 128), as the runtimes report them;
a SIGKILL that the supervisor did not send, in a container with a memory limit, is read as
the kernel's OOM killer (Podman on cgroup v1 does not set OOMKilled).
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any

from containers.runner import OpenedIO, StartError
from containers.spool import ContainerPlan, JobPlan
from gateway.model.job import wait_status

__all__ = [
    "SCRIPT_TARGET",
    "ContainerRunner",
    "docker_client",
    "job_labels",
    "parse_mounts",
    "remove_containers",
]

SCRIPT_TARGET = "/caldera/slurm_script"
_LABEL = "caldera.job_id"
_RUN_LABEL = "caldera.run"
_NAMESPACE_LABEL = "caldera.namespace"  # the backend's (containers.proctrack.namespace_for)


def job_labels(namespace: str, job_id: int, run: int) -> tuple[tuple[str, str], ...]:
    """The labels of one run's container: the backend, the job and the run, so that the
    backend finds it through the Docker API without its supervisor (requeue, a lost one)."""
    return ((_NAMESPACE_LABEL, namespace), (_LABEL, str(job_id)), (_RUN_LABEL, str(run)))


def remove_containers(
    host: str, labels: tuple[tuple[str, str], ...], timeout: float
) -> tuple[int, bool]:
    """Kill and remove every container carrying all these labels, then list again:
    (how many were removed, whether none is left). Not confirmed when the Docker API
    cannot be reached: the caller must not treat the run as gone."""
    if not labels:
        return 0, True
    selector = {"label": [f"{key}={value}" for key, value in labels]}
    removed = 0
    try:
        client = docker_client(host, timeout=max(timeout, 1.0))
    except Exception:  # noqa: BLE001 - no SDK or a bad URL: not confirmed
        return 0, False
    try:
        for container in client.containers.list(all=True, filters=selector):
            with contextlib.suppress(Exception):  # already stopped, or gone meanwhile
                container.kill()
            with contextlib.suppress(Exception):
                container.remove(force=True)
                removed += 1
        return removed, not client.containers.list(all=True, filters=selector)
    except Exception:  # noqa: BLE001 - the engine did not answer: not confirmed
        return removed, False
    finally:
        client.close()


def docker_client(host: str, timeout: float = 60.0) -> Any:
    """A docker SDK client for `host` (`unix:///path` or `tcp://...`)."""
    try:
        import docker
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise StartError("the docker Python SDK is not installed (pip install docker)") from exc
    return docker.DockerClient(base_url=host, timeout=int(timeout))


def parse_mounts(items: tuple[str, ...] | list[str]) -> tuple[tuple[str, str, bool], ...]:
    """pyxis's `--container-mounts`: `SRC[:DST[:FLAGS]]`, comma lists; FLAGS `ro` or `rw`."""
    out: list[tuple[str, str, bool]] = []
    for item in items:
        for part in item.split(","):
            if not part:
                continue
            fields = part.split(":")
            src = fields[0]
            dst = fields[1] if len(fields) > 1 and fields[1] else src
            flags = fields[2] if len(fields) > 2 else ""
            out.append((src, dst, "ro" in flags.split("+")))
    return tuple(out)


class ContainerRunner:
    """One container running the batch script."""

    def __init__(self, plan: JobPlan, io: OpenedIO) -> None:
        assert plan.container is not None
        self.plan = plan
        self.cplan: ContainerPlan = plan.container
        self.io = io
        self.client: Any = None
        self.container: Any = None
        self._status: int | None = None
        self._raw: int | None = None
        self._done = threading.Event()
        self._threads: list[threading.Thread] = []
        # streams that broke off (the engine's error instead of the job's output): their
        # (stdout, stderr, fd, bytes written) are read again in full once the job has ended
        self._broken: list[tuple[bool, bool, int, int]] = []
        self._oom = False
        self._signalled = False

    def start(self) -> None:
        plan, cplan = self.plan, self.cplan
        try:
            self.client = docker_client(cplan.docker_host)
            volumes: dict[str, dict[str, str]] = {
                plan.script: {"bind": SCRIPT_TARGET, "mode": "ro"},
            }
            if os.path.isdir(plan.workdir):
                volumes[plan.workdir] = {"bind": plan.workdir, "mode": "rw"}
            for src, dst, ro in cplan.mounts:
                volumes[src] = {"bind": dst, "mode": "ro" if ro else "rw"}
            kwargs: dict[str, Any] = {}
            if plan.memory_limit_mb:
                kwargs["mem_limit"] = f"{plan.memory_limit_mb}m"
                kwargs["memswap_limit"] = f"{plan.memory_limit_mb}m"
            env = dict(plan.env)
            self.container = self.client.containers.create(
                cplan.image,
                command=[SCRIPT_TARGET, *plan.args],
                entrypoint=[],
                user=f"{plan.uid}:{plan.gid}",
                group_add=[str(g) for g in plan.groups if g != plan.gid],
                working_dir=cplan.workdir or plan.workdir,
                environment=env,
                volumes=volumes,
                labels={_LABEL: str(plan.job_id), **dict(cplan.labels)},
                name=cplan.name,
                network_mode="host",
                detach=True,
                **kwargs,
            )
            self.container.start()
        except StartError:
            raise
        except Exception as exc:
            self._remove()
            raise StartError(f"container: {exc}") from exc
        outs = [(True, False, self.io.stdout)]
        if self.io.stderr != self.io.stdout:
            outs.append((False, True, self.io.stderr))
        else:
            outs = [(True, True, self.io.stdout)]
        for stdout, stderr, fd in outs:
            t = threading.Thread(target=self._pump, args=(stdout, stderr, fd), daemon=True)
            t.start()
            self._threads.append(t)
        waiter = threading.Thread(target=self._wait, daemon=True)
        waiter.start()

    def _pump(self, stdout: bool, stderr: bool, fd: int) -> None:
        """Copy the container's output to the job's file as it comes. Podman can answer a
        follow request for a container that has just exited with an error document in
        place of the output ("failed to obtain logs ... no such process"): that is never
        written to the job's file; the output is read again once the job has ended."""
        written = 0
        try:
            for chunk in self.container.logs(
                stdout=stdout, stderr=stderr, stream=True, follow=True
            ):
                if _engine_error(chunk):
                    raise RuntimeError("the log stream broke off")
                os.write(fd, chunk)
                written += len(chunk)
        except Exception:  # noqa: BLE001 - read again in full after the end
            self._broken.append((stdout, stderr, fd, written))

    def _recover_output(self) -> None:
        """The rest of the output of streams that broke off, read at once after the end."""
        for stdout, stderr, fd, written in self._broken:
            with contextlib.suppress(Exception):
                data = self.container.logs(stdout=stdout, stderr=stderr, stream=False)
                if isinstance(data, bytes) and not _engine_error(data) and len(data) > written:
                    os.write(fd, data[written:])
        self._broken.clear()

    def _wait(self) -> None:
        try:
            result = self.container.wait()
            self._raw = int(result.get("StatusCode", 1))
        except Exception:  # noqa: BLE001 - the engine went away: report a failure
            self._raw = 1
        self._done.set()

    def poll(self) -> int | None:
        if self._status is not None or not self._done.is_set():
            return self._status
        for t in self._threads:
            t.join(timeout=5.0)
        self._recover_output()
        raw = self._raw if self._raw is not None else 1
        with contextlib.suppress(Exception):
            self.container.reload()
            self._oom = bool(self.container.attrs.get("State", {}).get("OOMKilled"))
        if raw == 128 + 9 and self.plan.memory_limit_mb and not self._signalled:
            # Podman on cgroup v1 does not set OOMKilled; a SIGKILL nobody here sent to a
            # container with a memory limit is the kernel's OOM killer.
            self._oom = True
        if 128 < raw <= 128 + 64:
            self._status = wait_status(signal=raw - 128)
        else:
            self._status = wait_status(exit_code=raw)
        return self._status

    def wait(self, timeout: float) -> None:
        self._done.wait(timeout)

    def signal_batch(self, sig: int) -> None:
        self.signal_all(sig)

    def signal_all(self, sig: int) -> None:
        if self.container is not None and not self._done.is_set():
            self._signalled = True
            with contextlib.suppress(Exception):
                self.container.kill(signal=sig)

    def rss_kb(self) -> int:
        return 0  # the container's cgroup enforces the limit

    def out_of_memory(self) -> bool:
        return self._oom

    def cleanup(self) -> None:
        self._remove()
        self.io.close()

    def _remove(self) -> None:
        if self.container is not None:
            with contextlib.suppress(Exception):
                self.container.remove(force=True)


def _engine_error(chunk: bytes) -> bool:
    """Whether a log chunk is the engine's error document rather than the job's output."""
    # the SDK may have cut the document's first bytes off as a frame header, so match its
    # end: `..."message":"failed to obtain logs for Container ...","response":500}`
    return b'"response":5' in chunk[-64:] and b'"message":"' in chunk
