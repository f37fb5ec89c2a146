"""`join_stream`'s wiring: the job's slots over a user's own streaming DataFrames, results as rows (windjoin.spark)."""
