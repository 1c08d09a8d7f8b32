"""Scheduling: snapshot, actions, plugins, gang statements."""
