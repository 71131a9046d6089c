"""The `replay` probe: config, probe (run), answer."""
