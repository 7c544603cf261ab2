"""Persistence for the BBS: `Store` (transactions over records, their queries a module per entity) and the
schema and its migrations."""

from .store import Store, Tx

__all__ = ["Store", "Tx"]
