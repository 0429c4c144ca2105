"""The run's store and its judgement: the run folder (state.json, its journal, the lock),
the verdict "did this run train", and the monitor's reading of a job (observe: its
findings, its next action). Library code the Prefect tasks call."""
