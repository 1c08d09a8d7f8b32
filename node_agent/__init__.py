"""The per-node daemon: inventory (psutil, NVML, sysfs InfiniBand), topology, heartbeats.

Entry points: `node_agent.main.main(argv)` (`caldera agent`), `node_agent.agent.run_agent`
(the loop), `node_agent.inventory.Collector` (what the node has).
"""
