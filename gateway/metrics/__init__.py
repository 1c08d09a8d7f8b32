"""Prometheus metrics of the gateway: /metrics on the API socket and, when configured, on
TCP (listener.py); rendered from the job table in one pass (collect.py, render*.py) plus
what the gateway observes as it runs (observe.py)."""
