"""Durable job state: the Store interface and its SQLite (WAL) implementation."""

from gateway.store.base import JobQuery, Store, StoredEvent, StoreError
from gateway.store.sqlite import SqliteStore

__all__ = ["JobQuery", "SqliteStore", "Store", "StoreError", "StoredEvent"]
