"""The run folder, its messages and reports, and the verdict on a run: library code the
Prefect tasks call."""
