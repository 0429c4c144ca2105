"""`python -m remedy` with the sagemaker backend's waits shortened (the service's own
status changes take tens of seconds, so the backend polls every 10 s; the fake service
answers at once). Everything else is the command line as a user runs it."""

from remedy.cli import main
from remedy.jobs.sagemaker.backend import SageMakerBackend

SageMakerBackend.watch_poll_s = 0.5
SageMakerBackend.evaluator_poll_s = 0.3
SageMakerBackend.evaluator_drain_s = 30.0
SageMakerBackend.stop_poll_s = 0.2

if __name__ == "__main__":
    raise SystemExit(main())
