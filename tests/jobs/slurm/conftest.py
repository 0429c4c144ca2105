"""The test session's one Slurm cluster (tests/slurm_cluster.py), started the first time a
Slurm test needs it; Slurm's commands (the backend's, the tests') find it by SLURM_CONF."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.slurm_cluster import SlurmCluster, running_slurm, start_problem


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    if (problem := start_problem()) is not None:
        why, is_skip = problem
        (pytest.skip if is_skip else pytest.fail)(why)
    with running_slurm() as cluster:
        saved = os.environ.get("SLURM_CONF")
        os.environ["SLURM_CONF"] = cluster.env["SLURM_CONF"]
        try:
            yield cluster
        finally:
            if saved is None:
                os.environ.pop("SLURM_CONF", None)
            else:
                os.environ["SLURM_CONF"] = saved
