"""The engine and its operations: opening a store, ingest, updates, reads, search across tiers, integrity,
background sweeps."""
