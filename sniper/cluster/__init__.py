"""Sniper's process-level shell on Kafka: the ``sniper core`` process (partition hosting, recovery, split
roles), its metrics, state endpoint, audit log and timings, and the Kafka simulator driver's helpers.

Nothing here makes a scheduling decision: decisions come from the sans-IO ``sniper.core`` package, run by
the actors of ``sniper.actors``; this package moves their input and output through Kafka and owns processes,
sockets, clocks and files.
"""
