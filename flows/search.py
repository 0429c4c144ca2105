"""Architecture search: every candidate of a space runs the full remediation flow.

Candidates run as subflows in this process (at most `concurrency` at once) or, with
`use_deployments`, as separate runs of the remediate deployment, so the workers of a work
pool share them (`remedy deploy --pool POOL`, then `prefect worker start --pool POOL` on
each machine; infra/README.md). Deployment runs write their run directories under the
search directory, so that directory must be on a filesystem every worker mounts at the same
path. The run ends with a leaderboard (table artifact, leaderboard.json and leaderboard.md
in the search directory); candidates that could not be repaired are listed with why.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Annotated, Any

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import FlowRun
from prefect.deployments import run_deployment
from prefect.runtime import flow_run
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, Field

from remedy.flows.remediate import RemediateSettings, remediate
from remedy.flows.run_form import MODEL_FORM, RunSpecForm
from remedy.state_schema import DEFAULT_POLICY, Activation, Budgets, RunSpec, State
from remedy.state_schema.private import hidden_state
from remedy.tasks.leaderboard import open_search, publish_leaderboard
from remedy.tasks.plan import PolicyName
from remedy.tasks.record import hide_parameters, prepare_run, quiet_task_runs
from remedy.tasks.train import check_spec


class SearchSpace(BaseModel):
    """Values to try; the candidates are every combination (up to max_candidates)."""

    depth: list[int] = Field(default_factory=lambda: [20], description="ResNet depths (6n+2).")
    activation: list[Activation] = Field(
        default_factory=lambda: [Activation.elu, Activation.relu], description="Activations."
    )
    add_batch_norm: list[int] = Field(
        default_factory=lambda: [0, 1], description="0: no batch norm, 1: batch norm."
    )
    width: list[int] = Field(default_factory=lambda: [8], description="First-stack widths.")
    learning_rate: list[float] = Field(default_factory=lambda: [0.1], description="LRs.")
    warmup_learning_rate: list[float] = Field(
        default_factory=lambda: [0.1], description="Warmup LRs."
    )
    max_candidates: int = Field(16, gt=0, description="Most candidates to run.")

    def candidates(self, base: RunSpec) -> list[RunSpec]:
        """Every combination applied to the base spec; invalid ones fail here, not later."""
        axes: dict[str, list[Any]] = {
            "depth": self.depth,
            "activation": self.activation,
            "add_batch_norm": self.add_batch_norm,
            "width": self.width,
            "learning_rate": self.learning_rate,
            "warmup_learning_rate": self.warmup_learning_rate,
        }
        combos = itertools.product(*axes.values())
        specs = []
        for number, values in enumerate(itertools.islice(combos, self.max_candidates), 1):
            fields = dict(zip(axes, values, strict=True))
            base_name = f"{base.base_job_name[:30]}-c{number}"
            specs.append(
                RunSpec.model_validate(base.model_dump() | fields | {"base_job_name": base_name})
            )
        return specs


class SearchSettings(BaseModel):
    concurrency: int = Field(
        1,
        gt=0,
        description="Candidates running at once; with workers, their slots in all "
        "(machines x --limit).",
    )
    use_deployments: bool = Field(
        False,
        description="Run each candidate as a run of the remediate deployment (on workers).",
    )
    deployment: str = Field(
        "remediate/remediate",
        description="Deployment for candidates: remediate/workers is the one `remedy deploy` "
        "puts on a work pool, remediate/remediate the one `remedy serve` runs itself.",
    )
    worker_timeout_s: float | None = Field(
        3600.0,
        gt=0,
        description="With deployments: longest a candidate waits for a worker to start it; "
        "then it is cancelled and the leaderboard says why. null: wait for ever.",
    )
    budgets: Budgets = Field(default_factory=Budgets, description="Per candidate.")
    policy: PolicyName = Field(
        DEFAULT_POLICY, description="Remediation policy for every candidate."
    )
    remediate: RemediateSettings = Field(
        default_factory=RemediateSettings,
        description="Every candidate's remediation settings; its notification targets also "
        "get the search's one message at the end.",
    )
    notify_candidates: bool = Field(
        False,
        description="Also send each candidate's own messages (retraining, its end); off, "
        "only the search's one message at its end is sent.",
    )

    def candidate_settings(self) -> RemediateSettings:
        return self.remediate.model_copy(update={"notify": self.notify_candidates})


def check_deployment(name: str) -> str | None:
    """Refuse a candidate deployment that does not exist, before any candidate is sent;
    a warning when its work pool has no worker online (candidates wait for one)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.objects import WorkerStatus
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            deployment = client.read_deployment_by_name(name)
        except ObjectNotFound:
            raise ValueError(
                f"settings.deployment: no deployment {name!r} (`remedy deploy --pool POOL` "
                "registers remediate/workers; `remedy serve` registers remediate/remediate)"
            ) from None
        pool = deployment.work_pool_name
        if pool is None:  # served by `remedy serve`: it runs them itself
            return None
        workers = client.read_workers_for_work_pool(pool)
    if any(worker.status is WorkerStatus.ONLINE for worker in workers):
        return None
    return (
        f"no worker is online on work pool {pool!r}: candidates wait until one starts "
        f"(`prefect worker start --pool {pool} --type process`)"
    )


def candidate_dir(search_dir: str, number: int) -> str:
    return str(Path(search_dir) / f"candidate-{number:03d}")


@task(cache_policy=NO_CACHE)
def run_candidate(
    number: int, spec: RunSpec, search_dir: str, settings: SearchSettings
) -> dict[str, Any]:
    """Remediate one candidate to the end; its state.json is the result. A deployment run
    also reports its flow run (name, final state) for the leaderboard."""
    run_dir = str(Path(candidate_dir(search_dir, number)).resolve())  # the same on workers
    # The candidate's folder keeps the role and bucket; its flow run's parameters hide them.
    start = State(run_spec=spec, budgets=settings.budgets, policy=settings.policy)
    check_spec(start, run_dir, spec.base_job_name)  # as its flow would: before its folder
    shown = hidden_state(prepare_run(start, run_dir)).run_spec
    if not settings.use_deployments:
        final = remediate(
            run_spec=shown,
            budgets=settings.budgets,
            policy=settings.policy,
            run_dir=run_dir,
            settings=settings.candidate_settings(),
            return_state=True,  # a candidate that gave up ends Failed: the leaderboard says why
        )
        return {"flow_run_state": final.type.value, "flow_run_message": final.message or ""}
    flow_run = run_deployment(
        settings.deployment,
        parameters={
            "run_spec": shown.model_dump(mode="json"),
            "budgets": settings.budgets.model_dump(mode="json"),
            "policy": settings.policy,
            "run_dir": run_dir,
            "settings": settings.candidate_settings().model_dump(mode="json"),
        },
        flow_run_name=spec.base_job_name,
        as_subflow=True,
        timeout=0,  # created, not awaited: wait_for_candidate waits, with its timeout
    )
    assert isinstance(flow_run, FlowRun)  # called from sync code: ran, not a coroutine
    final = wait_for_candidate(flow_run.id, settings.worker_timeout_s)
    return {
        "flow_run": flow_run.name,
        "flow_run_state": final.type.value if final else "unknown",
        "flow_run_message": (final.message or "") if final else "",
    }


def wait_for_candidate(flow_run_id: Any, worker_timeout_s: float | None) -> Any:
    """The candidate run's final state. A run no worker has started within
    worker_timeout_s is cancelled (so no worker takes it later), saying so."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelled

    started = time.monotonic()
    with get_client(sync_client=True) as client:
        while True:
            run = client.read_flow_run(flow_run_id)
            state = run.state
            if state is not None and state.is_final():
                return state
            waiting = state is None or state.is_scheduled() or state.is_pending()
            if (
                waiting
                and worker_timeout_s is not None
                and time.monotonic() - started > worker_timeout_s
            ):
                message = (
                    f"no worker started it within worker_timeout_s ({worker_timeout_s:g} s): "
                    f"start one with `prefect worker start --pool {run.work_pool_name}`"
                )
                client.set_flow_run_state(flow_run_id, Cancelled(message=message), force=True)
                return client.read_flow_run(flow_run_id).state
            time.sleep(1.0)


def flow_run_of(future: Any) -> dict[str, Any]:
    """What run_candidate reported, once it ended; {} if it failed before reporting."""
    future.wait()
    result = future.result(raise_on_failure=False)
    return result if isinstance(result, dict) else {}


# ignore: prefect's TaskRunner[F] is invariant in F, so its own thread pool runner does not match
# the flow decorator's TaskRunner[PrefectFuture[Any]].
@flow(name="search", task_runner=ThreadPoolTaskRunner(max_workers=8), log_prints=True)  # type: ignore[arg-type]
def search(
    space: Annotated[SearchSpace, MODEL_FORM] = SearchSpace(),  # noqa: B008 (the UI's defaults)
    base_spec: RunSpecForm = RunSpec(),  # noqa: B008 (shown as the run form)
    settings: Annotated[SearchSettings, MODEL_FORM] = SearchSettings(),  # noqa: B008
    search_dir: str = "",
) -> list[dict[str, Any]]:
    """Run every candidate of a search space through the remediation flow and rank them.

    Args:
        space: Values to try for each hyperparameter; the candidates are every combination
            (up to max_candidates).
        base_spec: The run_spec every candidate starts from; the space's values replace its
            own, and each candidate's base_job_name gets -c<number>.
        settings: Candidates at once, deployments or in process, the budgets and policy of
            every candidate, their remediation settings and notifications.
        search_dir: Where the candidates' run folders and the leaderboard go (empty:
            RUNS/search-TIME-FLOW_RUN_NAME, RUNS being $REMEDY_RUNS_DIR or ./runs).
    """
    logger = get_run_logger()
    hide_parameters()  # the UI shows parameters: no role ARN or bucket there
    quiet_task_runs()  # no "Finished in state Completed()" line per task run
    search_dir = open_search(search_dir or None, flow_run.name)  # empty: the default, as run_dir
    specs = space.candidates(base_spec)
    if settings.use_deployments and (warning := check_deployment(settings.deployment)):
        logger.warning(warning)
    logger.info("searching %d candidates, %d at a time", len(specs), settings.concurrency)
    futures: dict[int, Any] = {}
    for number, spec in enumerate(specs, start=1):
        while sum(not f.state.is_final() for f in futures.values()) >= settings.concurrency:
            time.sleep(0.5)  # a window of `concurrency` candidates
        futures[number] = run_candidate.submit(number, spec, search_dir, settings)
    candidates = {
        number: (candidate_dir(search_dir, number), flow_run_of(future))
        for number, future in futures.items()
    }
    notify = settings.remediate
    return publish_leaderboard(search_dir, candidates, notify.notify_config, notify.notify_block)
