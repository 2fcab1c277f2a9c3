"""Sniper's process-level shell on Kafka: ``sniper broker``, ``sniper core``, ``sniper feed``/``record``,
the Kafka simulator driver's helpers, metrics, logging and the end-to-end benchmark.

Nothing here makes a scheduling decision: decisions come from the sans-IO ``sniper.core`` package, run by
the actors of ``sniper.actors``; this package moves their input and output through Kafka and owns processes,
sockets, clocks and files.
"""
