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
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE
from prefect.context import FlowRunContext
from prefect.deployments import run_deployment
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import BaseModel, Field
from remedy.flows.remediate import RemediateSettings, default_run_dir, remediate
from remedy.state_schema import Activation, Budgets, JobStatus, RunSpec, State, write_atomic
from remedy.tasks.messages import redact
from remedy.tasks.notify import notify
from remedy.tasks.persist import load_run, state_path


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
        axes = {
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
    budgets: Budgets = Field(default_factory=Budgets, description="Per candidate.")
    policy: str = Field("seed", description="Remediation policy for every candidate.")
    remediate: RemediateSettings = Field(default_factory=RemediateSettings)


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
    run_dir = candidate_dir(search_dir, number)
    state = State(run_spec=spec, budgets=settings.budgets, policy=settings.policy)
    if not settings.use_deployments:
        remediate(state=state, run_dir=run_dir, settings=settings.remediate)
        return {}
    flow_run = run_deployment(
        settings.deployment,
        parameters={
            "state": state.model_dump(mode="json"),
            "run_dir": str(Path(run_dir).resolve()),  # the same path on every worker
            "settings": settings.remediate.model_dump(mode="json"),
        },
        flow_run_name=spec.base_job_name,
        as_subflow=True,
    )
    final = flow_run.state
    return {
        "flow_run": flow_run.name,
        "flow_run_state": final.type.value if final else "unknown",
        "flow_run_message": (final.message or "") if final else "",
    }


def leaderboard_row(
    number: int, run_dir: str, flow_run: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One candidate from its run directory; flow_run: what run_candidate reported."""
    flow_run = flow_run or {}
    ran = f"flow run {flow_run.get('flow_run')} ended {flow_run.get('flow_run_state')}"
    if flow_run.get("flow_run_message"):
        ran += f": {flow_run['flow_run_message']}"
    if not state_path(run_dir).exists():
        why = "never started"
        if flow_run.get("flow_run_state") == "COMPLETED":  # it ran, somewhere else
            why = (
                f"{run_dir} is not visible here: put the search directory on a filesystem "
                "every worker shares"
            )
        elif flow_run:
            why = ran
        return {
            "candidate": number,
            "status": "never started",
            "accuracy": None,
            "why": redact(why),
        }
    state = load_run(run_dir)
    spec = state.history.attempts[0].spec if state.history.attempts else state.run_spec
    last = state.current_attempt
    completed = last is not None and last.outcome is JobStatus.Completed
    strategies = [a.strategy for a in state.history.attempts if a.strategy]
    return {
        "candidate": number,
        "depth": spec.depth,
        "activation": spec.activation.value,
        "batch_norm": spec.add_batch_norm,
        "width": spec.width,
        "learning_rate": spec.learning_rate,
        "warmup_learning_rate": spec.warmup_learning_rate,
        "attempts": len(state.history.attempts),
        "strategies": ", ".join(strategies) or "-",
        "accuracy": last.final_accuracy if completed and last else None,
        "steps_used": sum(a.steps_run for a in state.history.attempts),
        "status": "repaired" if completed and strategies else "clean" if completed else "failed",
        "why": "" if completed else redact(state.end_reason or (ran if flow_run else "unknown")),
        **({"flow_run": flow_run["flow_run"]} if flow_run.get("flow_run") else {}),
        "run_dir": run_dir,
    }


def flow_run_of(future: Any) -> dict[str, Any]:
    """What run_candidate reported, once it ended; {} if it failed before reporting."""
    future.wait()
    result = future.result(raise_on_failure=False)
    return result if isinstance(result, dict) else {}


def rank(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Completed candidates by accuracy, then fewer steps; the failed ones last."""
    return sorted(
        rows,
        key=lambda r: (r["accuracy"] is None, -(r["accuracy"] or 0), r.get("steps_used", 0)),
    )


def leaderboard_markdown(rows: list[dict[str, Any]]) -> str:
    columns = [
        "candidate",
        "depth",
        "activation",
        "batch_norm",
        "width",
        "learning_rate",
        "attempts",
        "strategies",
        "accuracy",
        "steps_used",
        "status",
        "why",
    ]
    if any(row.get("flow_run") for row in rows):  # candidates ran as deployment runs
        columns.append("flow_run")
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(str(row.get(c, "")) for c in columns) + " |")
    return "\n".join(lines) + "\n"


@flow(name="search", task_runner=ThreadPoolTaskRunner(max_workers=8), log_prints=True)
def search(
    space: SearchSpace = SearchSpace(),  # noqa: B008 (pydantic defaults for the UI form)
    base_spec: RunSpec = RunSpec(),  # noqa: B008
    settings: SearchSettings = SearchSettings(),  # noqa: B008
    search_dir: str | None = None,
) -> list[dict[str, Any]]:
    logger = get_run_logger()
    if search_dir is None:  # <REMEDY_RUNS_DIR or ./runs>/search-<time>-<flow run name>
        stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
        search_dir = default_run_dir(f"search-{stamp}-{FlowRunContext.get().flow_run.name}")
    specs = space.candidates(base_spec)
    if settings.use_deployments and (warning := check_deployment(settings.deployment)):
        logger.warning(warning)
    logger.info("searching %d candidates, %d at a time", len(specs), settings.concurrency)
    futures: dict[int, Any] = {}
    for number, spec in enumerate(specs, start=1):
        while sum(not f.state.is_final() for f in futures.values()) >= settings.concurrency:
            time.sleep(0.5)  # a window of `concurrency` candidates
        futures[number] = run_candidate.submit(number, spec, search_dir, settings)
    rows = rank(
        [
            leaderboard_row(number, candidate_dir(search_dir, number), flow_run_of(future))
            for number, future in futures.items()
        ]
    )
    write_atomic(Path(search_dir) / "leaderboard.json", json.dumps(rows, indent=2))
    write_atomic(Path(search_dir) / "leaderboard.md", leaderboard_markdown(rows))
    create_table_artifact(
        [{k: v for k, v in row.items() if k != "run_dir"} for row in rows],
        key="remedy-search-leaderboard",
        description=f"Leaderboard of {search_dir}",
    )
    best = rows[0] if rows and rows[0]["accuracy"] is not None else None
    summary = (
        f"best: candidate {best['candidate']} ({best['activation']}, bn {best['batch_norm']}, "
        f"depth {best['depth']}) accuracy {best['accuracy']:.3f}"
        if best
        else "no candidate completed"
    )
    notify("remedy: search finished", summary + "\n\n" + leaderboard_markdown(rows[:5]))
    logger.info("search finished: %s", summary)
    return rows
