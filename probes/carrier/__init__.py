"""The `carrier` probe: config, probe (run), answer."""
