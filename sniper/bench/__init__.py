"""``sniper bench``: benchmarks that print figures and never assert. In-process benchmarks through the real
actors (:mod:`sniper.bench.inprocess`), the end-to-end benchmark through a broker (:mod:`sniper.bench.e2e`),
and the cgroup CPU limit they can run under (:mod:`sniper.bench.cpulimit`). Only these and the drivers read
the wall clock."""
