"""The `profile` probe: config, probe (run), answer."""
