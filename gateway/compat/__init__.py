"""Slurm compatibility: the option table, parsers and formatters, all pure (no IO)."""
