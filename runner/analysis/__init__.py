"""Analysis of the store: compare, history, drift, the morning report, plots."""
