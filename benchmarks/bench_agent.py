"""CPU used by the node agent at its default 1 s report period.

    python benchmarks/bench_agent.py [--duration 60] [--period 1.0] [--tree gpu8]

Starts the gateway's receiver in this process (loopback, real CURVE keys) and the agent as a
separate process (`python -m node_agent`) reading the recorded 8-GPU/8-HCA sysfs tree and
the ibnetdiscover capture (NVML has no driver here: its initialisation fails once and is
retried every 5 minutes). After a warm-up, the agent's user+system CPU time over
`--duration` seconds is read with psutil; the figure is the share of one core. The receiver
counts the heartbeats and inventories that arrived.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gateway.inventory.keys import generate_keypair  # noqa: E402
from gateway.inventory.receiver import InventoryReceiver, ReceiverConfig  # noqa: E402


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=60.0)
    p.add_argument("--warmup", type=float, default=5.0)
    p.add_argument("--period", type=float, default=1.0)
    p.add_argument("--tree", default="gpu8")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        keys = Path(tmp)
        generate_keypair(keys / "server", "gateway")
        generate_keypair(keys / "agents", "gpu01")
        (keys / "auth").mkdir(mode=0o700)
        (keys / "auth" / "gpu01.key").write_bytes((keys / "agents" / "gpu01.key").read_bytes())
        receiver = InventoryReceiver(
            ReceiverConfig(
                server_secret=keys / "server" / "gateway.key_secret",
                authorized_dir=keys / "auth",
                bind="tcp://127.0.0.1:*",
                period_s=args.period,
            )
        )
        receiver.start()
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        argv_agent = [
            sys.executable, "-m", "node_agent", "--gateway", receiver.endpoint,
            "--name", "gpu01", "--key", str(keys / "agents" / "gpu01.key_secret"),
            "--server-key", str(keys / "server" / "gateway.key"),
            "--period", str(args.period),
            "--sysfs-root", str(ROOT / "tests" / "data" / "sysfs" / args.tree),
            "--ibnetdiscover", str(ROOT / "tests" / "data" / "ibnetdiscover" / "fabric.txt"),
            "--log-level", "WARNING",
        ]  # fmt: skip
        agent = subprocess.Popen(argv_agent, env=env, cwd=ROOT)
        try:
            proc = psutil.Process(agent.pid)
            time.sleep(args.warmup)
            hb0 = receiver.stats.heartbeats
            t0, c0 = time.monotonic(), proc.cpu_times()
            time.sleep(args.duration)
            t1, c1 = time.monotonic(), proc.cpu_times()
            hb1 = receiver.stats.heartbeats
            rss = proc.memory_info().rss
        finally:
            agent.terminate()
            agent.wait(10)
            receiver.stop()
    cpu = (c1.user - c0.user) + (c1.system - c0.system)
    wall = t1 - t0
    row = {
        "tree": args.tree,
        "period_s": args.period,
        "duration_s": round(wall, 1),
        "agent_cpu_s": round(cpu, 3),
        "agent_cpu_share_of_core": round(cpu / wall, 5),
        "agent_cpu_ms_per_report": round(1000 * cpu / max(hb1 - hb0, 1), 3),
        "heartbeats_received": hb1 - hb0,
        "inventories_received": receiver.stats.inventories,
        "agent_rss_mb": round(rss / 2**20, 1),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
