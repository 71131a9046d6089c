"""The lab's hosts as Ray nodes: connecting, pinning tasks, what a job ran on."""
