"""The `goodput` probe: config, probe (run), answer."""
