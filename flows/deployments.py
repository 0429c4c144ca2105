"""Deployments of remedy's flows: served by `remedy serve` (no work pool needed), or the
remediate deployment registered on a work pool (`remedy deploy`) for workers on N machines.

The remediate deployment's parameters are what a person chooses, as pydantic models, so
the Prefect UI shows a form: run_spec fields with their defaults and help text, budgets
and settings as groups, dropdowns for activation, dataset and policy. The run's own state
is not in the form (the flow's `state` parameter, for the API and the CLI, is left out).
The form's order, groups and the fields it leaves out come with the parameters' types
(flows/run_form.py), so a deployment registered any way (here, or `prefect deploy` with
infra/prefect.yaml) shows the same form.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from prefect import serve
from prefect.schedules import Cron
from prefect.types.entrypoint import EntrypointType

from remedy.flows.remediate import remediate
from remedy.flows.search import search

REMEDIATE_DEPLOYMENT = "remediate"
SEARCH_DEPLOYMENT = "overnight"
DEFAULT_SEARCH_CRON = "0 1 * * *"  # 01:00 every night
# On a work pool (infra/prefect.yaml says the same): its own name, so that `remedy serve`,
# which registers remediate/remediate, never replaces it.
POOL_DEPLOYMENT = "workers"
# By module, so a worker needs only the installed package (pip install), not a checkout.
REMEDIATE_ENTRYPOINT = "remedy.flows.remediate:remediate"
SEARCH_ENTRYPOINT = "remedy.flows.search:search"
REMEDIATE_DESCRIPTION = (
    "Train, watch with the tensor debugger, repair and relaunch until a run completes "
    "cleanly. Fill in run_spec (the job's hyperparameters) and start."
)


def remediate_deployment(parameters: dict[str, Any] | None = None) -> Any:
    """parameters: the form's defaults, e.g. {"run_spec": {...}, "policy": "adaptive"}."""
    deployment = remediate.to_deployment(
        name=REMEDIATE_DEPLOYMENT,
        parameters=parameters or {},
        description=REMEDIATE_DESCRIPTION,
        tags=["remedy"],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    return deployment


def deploy_to_pool(
    pool: str,
    name: str = POOL_DEPLOYMENT,
    parameters: dict[str, Any] | None = None,
) -> UUID:
    """Register remediate on a work pool; `prefect worker start --pool POOL` runs its runs.

    What `prefect deploy --prefect-file infra/prefect.yaml` registers, with no prompts and
    a clear error when the pool is missing.
    """
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound
    from prefect.utilities.callables import parameter_schema

    with get_client(sync_client=True) as client:
        try:
            client.read_work_pool(pool)
        except ObjectNotFound:
            raise ValueError(
                f"no work pool {pool!r}: create it with "
                f"`prefect work-pool create {pool} --type process`"
            ) from None
        return client.create_deployment(
            flow_id=client.create_flow_from_name(remediate.name),
            name=name,
            work_pool_name=pool,
            entrypoint=REMEDIATE_ENTRYPOINT,
            pull_steps=[],  # nothing to fetch: the flow is imported from the installed package
            parameters=parameters or {},
            parameter_openapi_schema=parameter_schema(remediate).model_dump(exclude_unset=True),
            description=REMEDIATE_DESCRIPTION,
            tags=["remedy"],
            enforce_parameter_schema=True,
        )


def search_deployment(
    cron: str = DEFAULT_SEARCH_CRON,
    timezone: str = "UTC",
    parameters: dict[str, Any] | None = None,
) -> Any:
    """The overnight architecture search, on a cron schedule in the given timezone."""
    deployment = search.to_deployment(
        name=SEARCH_DEPLOYMENT,
        description="Every candidate of the search space runs the full remediation flow; "
        "the run ends with a leaderboard.",
        schedule=Cron(cron, timezone=timezone),
        parameters=parameters or {},
        tags=["remedy", "search"],
        entrypoint_type=EntrypointType.MODULE_PATH,
    )
    return deployment


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
