"""YARN's proportional preemption policy, the baseline Sniper is measured against, and its conformance cases."""
