"""Topology readers and writers: Slurm topology.conf (tree and block), Kubernetes node
labels, agent discovery and ibnetdiscover output; Volcano HyperNode objects; PCIe affinity.
"""
