"""Models of the job's protocols, driven by the tests and the benchmarks and not shipped in the wheel.

Each is a small in-process stand-in for what the Spark job does across processes (a slot's group-move protocol,
memory adaptation over partition groups, a cluster of slots with lagging inboxes), written to check the job's
rules against the oracles and to measure policies without Spark.
"""
