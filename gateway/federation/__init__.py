"""Multi-cluster federation: eligibility, predicted-start routing, bursting, siblings."""
