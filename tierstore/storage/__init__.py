"""Durable storage: the SQLite catalog, its keyword index, object stores, files, locks and ownership of an
object-store prefix."""
