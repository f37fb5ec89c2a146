"""The read side of results: one-time and continuous queries across the Redis and Parquet tiers."""
