"""The gateway core: submission, scheduling loop, job control, configuration."""
