"""Job backends behind one small interface: launch / describe / stop / logs."""

from remedy.jobs.base import (
    JobBackend,
    JobDescription,
    JobNotFound,
    RuleEvaluationStatus,
    is_infrastructure_failure,
)

__all__ = [
    "backend_for",
    "JobBackend",
    "JobDescription",
    "JobNotFound",
    "RuleEvaluationStatus",
    "is_infrastructure_failure",
]


def backend_for(spec_backend: str, run_dir: str) -> JobBackend:
    """The backend named by run_spec.backend, keeping its jobs under run_dir."""
    if spec_backend == "local":
        from remedy.jobs.local import LocalBackend

        return LocalBackend(run_dir)
    raise ValueError(f"run_spec.backend: unknown backend {spec_backend!r}; known: local")
