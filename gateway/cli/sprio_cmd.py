"""The `sprio` command (gateway/cli/policy_cmds.py)."""

from gateway.cli.policy_cmds import sprio_main as main

__all__ = ["main"]
