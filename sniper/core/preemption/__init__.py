"""Sans-IO preemption decisions: snapshots, YARN's ideal assignment and the proportional baseline policy."""
