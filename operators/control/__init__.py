"""Controller policies: pure functions and small state machines from load metrics to control decisions."""
