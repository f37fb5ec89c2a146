"""Runnable benchmarks; each writes benchmarks/results/NAME.json."""
