"""Evaluating mechanisms offline: datasets and their streams, the paper's requirement set-ups,
replaying a stream through a mechanism and the error metrics (no I/O)."""
