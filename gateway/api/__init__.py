"""The HTTP API of the gateway (FastAPI on a Unix socket)."""
