"""Slurm-named commands and the `caldera` command."""
