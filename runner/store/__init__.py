"""The store: every result keyed by host and checkpoint, and checkpoint fingerprints."""
