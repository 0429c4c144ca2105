"""The training job (python -m training.train) and its parts. Imports models and debugger only."""
