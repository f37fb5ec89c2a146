"""Edges to the outside world, one package per outside system: `kafka`, `formats` (record codecs), `redis`,
`files` (Parquet and local files), `results` (the read side of results), `spark` and `local` (this machine's
services, processes and credential files)."""
