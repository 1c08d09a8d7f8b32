"""The `sshare` command (gateway/cli/policy_cmds.py)."""

from gateway.cli.policy_cmds import sshare_main as main

__all__ = ["main"]
