"""Apache YuniKorn's preemption test cases as Sniper traces (see tests/test_yunikorn_preemption.py)."""
