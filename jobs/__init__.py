"""Job backends behind one typed interface (jobs/base.py), found by name (jobs/registry.py)."""

from remedy.jobs.base import (
    JobBackend,
    JobNotFound,
    JobSnapshot,
    Progress,
    RuleEvaluation,
    RuleWord,
    is_infrastructure_failure,
)
from remedy.jobs.registry import backend_class, backend_for, known_backends, register_backend

__all__ = [
    "JobBackend",
    "JobNotFound",
    "JobSnapshot",
    "Progress",
    "RuleEvaluation",
    "RuleWord",
    "backend_class",
    "backend_for",
    "is_infrastructure_failure",
    "known_backends",
    "register_backend",
]
