"""Deployments of remedy's flows, served by `remedy serve` (no work pool needed).

The remediate deployment's parameters are the flow's pydantic models, so the Prefect UI
shows a form: run_spec fields with their defaults and help text, dropdowns for
activation, dataset and next_action, budgets and settings as groups.
"""

from __future__ import annotations

from typing import Any

from prefect import serve
from prefect.schedules import Cron

from flows.remediate import remediate
from flows.search import search

REMEDIATE_DEPLOYMENT = "remediate"
SEARCH_DEPLOYMENT = "overnight"
DEFAULT_SEARCH_CRON = "0 1 * * *"  # 01:00 every night


def remediate_deployment(parameters: dict[str, Any] | None = None) -> Any:
    """parameters: the form's defaults, e.g. {"state": {"run_spec": {...}}}."""
    return remediate.to_deployment(
        name=REMEDIATE_DEPLOYMENT,
        parameters=parameters or {},
        description="Train, watch with the tensor debugger, repair and relaunch until a run "
        "completes cleanly. Fill in run_spec (the job's hyperparameters) and start.",
        tags=["remedy"],
    )


def search_deployment(
    cron: str = DEFAULT_SEARCH_CRON,
    timezone: str = "UTC",
    parameters: dict[str, Any] | None = None,
) -> Any:
    """The overnight architecture search, on a cron schedule in the given timezone."""
    return search.to_deployment(
        name=SEARCH_DEPLOYMENT,
        description="Every candidate of the search space runs the full remediation flow; "
        "the run ends with a leaderboard.",
        schedule=Cron(cron, timezone=timezone),
        parameters=parameters or {},
        tags=["remedy", "search"],
    )


def serve_deployments(
    limit: int | None = None,
    search_cron: str = DEFAULT_SEARCH_CRON,
    search_timezone: str = "UTC",
    search_parameters: dict[str, Any] | None = None,
    remediate_parameters: dict[str, Any] | None = None,
) -> None:
    """Block, running flow runs of every remedy deployment as subprocesses."""
    serve(
        remediate_deployment(remediate_parameters),
        search_deployment(search_cron, search_timezone, search_parameters),
        limit=limit,
    )
