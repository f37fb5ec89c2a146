"""windjoin's processes, one sub-package each; they wire operators and connectors and hold no join logic.

- `job`: the streaming join job (Kafka source → adapter → stateful join per slot → sinks), run by `windjoin run`.
- `frames`: the job's slots over a user's own streaming DataFrames (`windjoin.spark.join_stream`).
- `controller`: the control loop over the job's load reports (`windjoin controller`).
- `proxy`: the query proxy's HTTP service (`windjoin proxy`).
- `sites`: the distributed PMJoin runtime (`windjoin sites`).
- `cli`: the `windjoin` command line, one module per command.
"""
