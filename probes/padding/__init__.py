"""The `padding` probe: config, probe (run), answer."""
