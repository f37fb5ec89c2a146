"""The query proxy process: one-time and continuous queries over the sinks, over HTTP (`app`), with
authentication (`access`, `tokens`), per-client limits, bounds and metrics (`windjoin proxy`)."""
