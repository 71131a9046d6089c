"""The corpus kit: records, token lengths and their cache, batching. Shared by the corpus probes; never imports a
probe."""
