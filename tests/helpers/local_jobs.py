"""Running entry points of tests/jobs/entry_points on the real local backend."""

from __future__ import annotations

import time

from remedy.jobs import JobSnapshot
from remedy.jobs.local import LocalBackend
from remedy.state_schema import RunSpec


def spec(entry: str, **fields: object) -> RunSpec:
    """A module of tests/jobs/entry_points, run by the launcher with `hyperparameters`."""
    return RunSpec(entry_point=f"tests.jobs.entry_points.{entry}", rules=[], **fields)


def wait_final(backend: LocalBackend, name: str, timeout: float = 60.0) -> JobSnapshot:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        description = backend.describe(name)
        if description.is_final:
            return description
        time.sleep(0.1)
    raise AssertionError(f"{name} not final after {timeout}s: {backend.describe(name)}")
