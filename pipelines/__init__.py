"""Processes and wiring (CLI, jobs); thin, with no join logic of their own."""
