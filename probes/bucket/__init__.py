"""The `bucket` probe: config, probe (run), answer."""
