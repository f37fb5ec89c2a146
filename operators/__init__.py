"""Window-join operators: pure Python + numpy, no Spark and no I/O, so every kernel is unit-testable."""
