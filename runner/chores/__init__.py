"""Lab chores across hosts: the safe purge of intermediate checkpoints."""
