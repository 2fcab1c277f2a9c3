"""Tools around the scheduler: benchmarks, the CPU limit for them, the feed player and recorder, the
independent ordered checker, and the preemption preview. None of it is decision logic."""
