"""Everything that is not measurement: CLI, cluster file, plans, launchers, store, reports."""
