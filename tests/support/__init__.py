"""Helpers shared by tests that drive real components (Slurm test cluster, ...)."""
