"""The local backend's own fields of a run_spec (run_spec.local)."""

from __future__ import annotations

from remedy.state_schema import RunSpec
from remedy.state_schema.local_spec import LocalSpec


def local_of(spec: RunSpec) -> LocalSpec:
    """The run's local fields (run_spec.local; the defaults when it gives none)."""
    return spec.local or LocalSpec()
