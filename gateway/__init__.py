"""Caldera's control plane: job model, Slurm compatibility, store, scheduler, API and CLI."""
