"""The `mask` probe: config, probe (run), answer."""
