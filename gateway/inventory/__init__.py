"""The gateway side of the node agents: ZeroMQ receiver with CURVE authentication, key
management, and the node registry (heartbeats, down-marking, events).

Modules: `messages` (wire types), `keys` (CURVE key files), `registry` (NodeRegistry),
`receiver` (InventoryReceiver), `convert` (inventories -> model Node). Import from them
directly (this package imports nothing, so the scheduler never loads ZeroMQ).

Wiring, in the gateway daemon::

    from gateway.inventory.registry import EventKind, NodeRegistry
    from gateway.inventory.receiver import InventoryReceiver, ReceiverConfig
    registry = NodeRegistry(period_s=1.0, missed=3)
    registry.subscribe(on_node_event)          # EventKind.DOWN -> requeue/fail that node's gangs
    receiver = InventoryReceiver(ReceiverConfig(server_secret=..., authorized_dir=...), registry)
    receiver.start()                           # background thread; receiver.stop() at shutdown
    registry.nodes()                           # agent-only nodes, or per backend node:
    merge_inventory(node, rec.inventory, rec.heartbeat, switch=...)   # gateway.inventory.convert
    registry.topology()                        # discovered switch tree
"""
