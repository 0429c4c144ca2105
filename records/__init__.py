"""The run's store and its judgement: the run folder (state.json, its journal, the lock) and
the verdict "did this run train". Library code the Prefect tasks call (the monitor's reading
of a job is in remedy.decisions.observe)."""
