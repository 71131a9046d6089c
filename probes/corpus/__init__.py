"""The corpus kit: records, token lengths and their cache, padded tokens (padded), the bucket sweep (buckets),
batching. Shared by the corpus probes; never imports a probe."""
