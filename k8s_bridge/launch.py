"""What a gang's pods need for srun/mpirun across ranks (pure; render.py and objects.py use it).

- The launcher (pod_launcher.py, pod_agent.py, pod_init.py, pod_signal.py, pod_launch_plan.py,
  pod_wire.py, pod_step_files.py and the local runner's containers/multi_prog.py,
  step_rules.py, step_alloc.py, step_book.py, srun_claim.py and srun_options.py: standard
  library only) lives in one ConfigMap per namespace,
  `<prefix>-launcher`, not in each job's root: it is ~50 KB, and a copy per job would add
  gigabytes to etcd in a flood of 100,000 jobs. objects.py creates it (or brings its
  content up to date) before the first gang; pods mount it read-only at /caldera/launch
  (`bin/srun` first in PATH; `launcher.py init` runs the batch script on rank 0,
  `launcher.py agent` serves the tasks of ranks > 0, `launcher.py signal` is scancel's).
- The job's secret: a token in the root ConfigMap (mounted 0400, readable by the job's
  group through fsGroup), HMAC(launcher_key, attempt name), so a retried render gives the
  same value and no random state is kept; `launcher_key` is random per gateway process
  (K8sOptions). The agents prove the client knows it (pod_agent.py).
- The rank addresses: `hosts` in the root, empty at creation, written once every rank has a
  pod IP (`hosts_text`, by the controller); the kubelet refreshes the mounted file.
- The time limit and --signal's warning: `init` in the root (`init_text`), which rank 0's
  init reads: it says `DUE TO TIME LIMIT` and delivers the warning as slurmctld does
  (pod_init.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from containers.step_rules import PERIODIC_TIMEOUT_S
from gateway.model.values import SignalSpec
from k8s_bridge.names import (
    LABEL_CLUSTER,
    LABEL_MANAGED,
    LABEL_ROLE,
    MANAGED_BY,
    GangNames,
    label_value,
)

__all__ = [
    "AGENT_PORT",
    "BATCH_INIT",
    "LAUNCH_DIR",
    "NO_LAUNCHER",
    "WORKER_COMMAND",
    "hosts_text",
    "init_text",
    "job_token",
    "launcher_configmap",
    "launcher_mount",
    "launcher_name",
    "launcher_volume",
    "limit_command",
    "search_path",
    "signal_command",
]

Manifest = dict[str, Any]
LAUNCH_DIR = "/caldera/launch"
AGENT_PORT = 6818  # slurmd's port; pod_agent.PORT
_HERE = Path(__file__).parent
SOURCES = {
    "launcher": (_HERE / "pod_launcher.py").read_text(),
    "launch-plan": (_HERE / "pod_launch_plan.py").read_text(),
    "launch-wire": (_HERE / "pod_wire.py").read_text(),
    "agent": (_HERE / "pod_agent.py").read_text(),
    "init": (_HERE / "pod_init.py").read_text(),
    "signal": (_HERE / "pod_signal.py").read_text(),
    "step-files": (_HERE / "pod_step_files.py").read_text(),
    "multi-prog": (_HERE.parent / "containers" / "multi_prog.py").read_text(),
    "step-rules": (_HERE.parent / "containers" / "step_rules.py").read_text(),
    "step-alloc": (_HERE.parent / "containers" / "step_alloc.py").read_text(),
    "step-book": (_HERE.parent / "containers" / "step_book.py").read_text(),
    "srun-claim": (_HERE.parent / "containers" / "srun_claim.py").read_text(),
    "srun-options": (_HERE.parent / "containers" / "srun_options.py").read_text(),
}


def _launcher_or(role: str, otherwise: str) -> str:
    """Shell text that runs `launcher.py <role>` with the image's python3, or `otherwise`
    in an image without it. Fixed text, no user string: nothing of the job goes through it."""
    return (
        f"for py in /usr/bin/python3 /usr/local/bin/python3; do [ -x $py ] && "
        f"[ -f {LAUNCH_DIR}/launcher.py ] && exec $py {LAUNCH_DIR}/launcher.py {role}; done; "
        f"{otherwise}"
    )


# Ranks > 0: the agent when the image has python3, else the old wait (an image without
# python3 runs the batch script on rank 0 as before, only srun cannot reach the ranks).
WORKER_COMMAND = (
    "/bin/sh",
    "-c",
    _launcher_or("agent", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"),
)
# Rank 0: the batch command under the launcher's init (pod_init.py: SIGTERM reaches every
# process of the pod, as slurmstepd's does), or run as PID 1 itself in an image without
# python3. The command follows as arguments.
BATCH_INIT = ("/bin/sh", "-c", _launcher_or('init "$@"', 'exec "$@"'), "caldera-init")
# scancel's signals, run in rank 0's container by the API's exec (pod_signal.py)
NO_LAUNCHER = 4  # the image has no python3 (or the namespace no launcher)
_SIGNAL = _launcher_or('signal "$@"', f"echo 'no launcher in this pod' >&2; exit {NO_LAUNCHER}")
_LIMIT = _launcher_or('limit "$@"', f"echo 'no launcher in this pod' >&2; exit {NO_LAUNCHER}")


def signal_command(signum: int, batch_only: bool = False, step: int | None = None) -> list[str]:
    """The command that signals the job in rank 0 (numbers only: nothing of the user's)."""
    where = ["--batch"] if batch_only else [] if step is None else ["--step", str(int(step))]
    return ["/bin/sh", "-c", _SIGNAL, "caldera-signal", *where, str(int(signum))]


def limit_command(limit_s: float | None) -> list[str]:
    """The command that gives rank 0's init a new time limit (real seconds from the job's
    start; None: no limit). A number only: nothing of the user's."""
    value = "none" if limit_s is None else repr(float(limit_s))
    return ["/bin/sh", "-c", _LIMIT, "caldera-limit", value]


def launcher_name(prefix: str) -> str:
    """The namespace's launcher ConfigMap."""
    return f"{prefix}-launcher"


def launcher_configmap(prefix: str, namespace: str, cluster: str) -> Manifest:
    """The shared launcher ConfigMap (no job labels: reconcile never takes it for a job's)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": launcher_name(prefix),
            "namespace": namespace,
            "labels": {
                LABEL_MANAGED: MANAGED_BY,
                LABEL_CLUSTER: label_value(cluster),
                LABEL_ROLE: "launcher",
            },
        },
        "data": dict(SOURCES),
    }


def launcher_volume(prefix: str) -> Manifest:
    """The launcher in a pod: optional, so a namespace without it still runs scripts."""
    return {
        "name": "launcher",
        "configMap": {
            "name": launcher_name(prefix),
            "optional": True,
            "defaultMode": 0o444,
            "items": [
                {"key": "launcher", "path": "launcher.py", "mode": 0o555},
                {"key": "launcher", "path": "bin/srun", "mode": 0o555},
                {"key": "launch-plan", "path": "lib/k8s_bridge/pod_launch_plan.py"},
                {"key": "launch-wire", "path": "lib/k8s_bridge/pod_wire.py"},
                {"key": "agent", "path": "lib/k8s_bridge/pod_agent.py"},
                {"key": "init", "path": "lib/k8s_bridge/pod_init.py"},
                {"key": "signal", "path": "lib/k8s_bridge/pod_signal.py"},
                {"key": "step-files", "path": "lib/k8s_bridge/pod_step_files.py"},
                {"key": "multi-prog", "path": "lib/containers/multi_prog.py"},
                {"key": "step-rules", "path": "lib/containers/step_rules.py"},
                {"key": "step-alloc", "path": "lib/containers/step_alloc.py"},
                {"key": "step-book", "path": "lib/containers/step_book.py"},
                {"key": "srun-claim", "path": "lib/containers/srun_claim.py"},
                {"key": "srun-options", "path": "lib/containers/srun_options.py"},
            ],
        },
    }


def launcher_mount() -> Manifest:
    return {"name": "launcher", "mountPath": LAUNCH_DIR, "readOnly": True}


def search_path(environment: Mapping[str, str]) -> str:
    """The pods' PATH: the launcher's srun first, then the job's own PATH."""
    return f"{LAUNCH_DIR}/bin:" + (environment.get("PATH") or "/usr/local/bin:/usr/bin:/bin")


def job_token(key: bytes, names: GangNames) -> str:
    """The attempt's secret (the same for every render of it in this gateway process)."""
    return hmac.new(key, f"caldera-job:{names.base}".encode(), hashlib.sha256).hexdigest()


def init_text(
    signal: SignalSpec | None, limit_s: int | None, time_scale: float, kill_wait_s: int
) -> str:
    """What rank 0's init needs (pod_init.py), in real seconds: the time limit, which it
    enforces, with KillWait between its SIGTERM and SIGKILL, and `--signal`'s warning: the
    signal, its lead, the period of slurmctld's time-limit checks, and whether the batch
    shell alone gets it (none without a limit, nor for `R:`, a reservation's end, which the
    local runner does not signal either). KillWait even without a limit: an update may
    give one."""
    data: dict[str, object] = {"kill_wait_s": kill_wait_s}
    if limit_s is not None:
        data["limit_s"] = limit_s
        if signal is not None and not signal.reservation:
            data["warn"] = {
                "signal": signal.signal,
                "lead_s": signal.time * time_scale,
                "period_s": PERIODIC_TIMEOUT_S * time_scale,
                "batch_only": signal.batch_only,
            }
    return json.dumps(data, separators=(",", ":"))


def hosts_text(names: GangNames, ranks: int, ips: Mapping[int, str | None]) -> str | None:
    """`<ip> <rank host name> <rank DNS name>` per rank, once every rank has an IP."""
    if ranks < 2 or any(not ips.get(r) for r in range(ranks)):
        return None
    return "".join(f"{ips[r]} {names.pod(r)} {names.host(r)}\n" for r in range(ranks))


def stale(existing: Mapping[str, Any] | None) -> bool:
    """Whether a launcher ConfigMap read from the server differs from this gateway's."""
    data = (existing or {}).get("data") or {}
    return any(data.get(k) != v for k, v in SOURCES.items())


def rank_ips(pods: Iterable[Any]) -> dict[int, str | None]:
    """Rank -> pod IP of the pods (PodState) the watch shows."""
    return {p.rank: p.ip for p in pods if not p.deleting}
