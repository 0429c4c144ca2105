"""The training job (python -m remedy.training.train) and its parts.

Imports models, debugger and state_schema only."""
