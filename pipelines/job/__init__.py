"""The streaming join job: Kafka source → input adapter → stateful join per slot (Spark) → sinks, exactly once.

`join_job.start_job` wires it; `join_state` is the per-slot stateful join inside Spark; `slot_output` writes a
slot's results from its executor; `sinks` is the sink extension point (the `Sink` protocol, the registry of sink
kinds, `build_sinks`; the built-in kinds in `builtin_sinks`); the rest are the driver's per-batch duties (control
feed, load reports, snapshots, metrics, executor scaling, dead letters, checkpoint identity).
"""
