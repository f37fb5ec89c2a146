"""The streaming join job: Kafka source → input adapter → stateful join per slot (Spark) → sinks, exactly once.

`join_job.start_job` wires it; `join_state` is the per-slot stateful join inside Spark, composed of the slot's
rooms: `slot_meta` (its typed metadata), `segment_store` (stored tuples, expiry), `slot_windows` (decoded windows
between batches), `hand_over` (holder changes), `slot_spill` (disk pushes, clean-ups), `slot_batch` (the batch's
rows), `slot_stats` (its summary), `stored_rows` (the stored layout); `slot_output` writes a slot's results from
its executor; `sinks` is the sink extension point (the `Sink` protocol, the registry of sink kinds,
`build_sinks`; the built-in kinds in `builtin_sinks`); the rest are the driver's per-batch duties (control feed,
load reports, snapshots, metrics, executor scaling, dead letters, checkpoint identity).
"""
