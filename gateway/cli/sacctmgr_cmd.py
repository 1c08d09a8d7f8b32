"""The `sacctmgr` command (gateway/cli/policy_cmds.py)."""

from gateway.cli.policy_cmds import sacctmgr_main as main

__all__ = ["main"]
