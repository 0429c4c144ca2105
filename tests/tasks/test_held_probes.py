"""Probes held at their bound (a backend that can continue them) never outlive the flow's
decision: a cancelled flow and a spent launch budget both stop them, on the real local
backend."""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

from remedy.jobs.local import LocalBackend
from remedy.records.run_folder import persist
from remedy.state_schema import (
    Attempt,
    JobStatus,
    NextAction,
    PlannedChange,
    ProbeCandidate,
    ResultKind,
    State,
)
from remedy.tasks.probe import probe as probe_task
from remedy.tasks.stop import stop_latest_job
from remedy.tasks.train import train
from tests.helpers.local_jobs import spec, wait_final

BOUND = 3


def launch_held(backend: LocalBackend, name: str) -> Attempt:
    """A probe of the sgd entry point, launched and waited for until it holds at BOUND."""
    probe_spec = spec("sgd", max_updates=BOUND)
    backend.launch(name, probe_spec)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        snapshot = backend.describe(name)
        assert not snapshot.is_final, f"{name} ended instead of holding: {backend.logs(name)}"
        if snapshot.progress is not None and snapshot.progress.step >= BOUND:
            time.sleep(0.5)  # held: no update past the bound
            snapshot = backend.describe(name)
            assert snapshot.status is JobStatus.InProgress and snapshot.progress is not None
            assert snapshot.progress.step == BOUND
            return Attempt(job_name=name, spec=probe_spec, kind="probe", held=True)
        time.sleep(0.1)
    raise AssertionError(f"{name} never reached its bound: {backend.logs(name)}")


@pytest.fixture
def run_dir(tmp_path: Path) -> Iterator[Path]:
    """The run's folder; a job the test left held is stopped however the test ended."""
    folder = tmp_path / "run"
    yield folder
    backend = LocalBackend(folder)
    for job in (folder / "jobs").glob("*"):
        if not backend.describe(job.name).is_final:
            backend.stop(job.name)


def test_cancelling_the_flow_stops_its_held_probes(run_dir: Path) -> None:
    backend = LocalBackend(run_dir)
    assert backend.can_continue
    probes = [launch_held(backend, f"probe-{i}") for i in range(2)]
    state = State().model_copy(update={"run_spec": spec("sgd")})
    state = state.model_copy(
        update={"history": state.history.model_copy(update={"attempts": probes})}
    )
    persist(run_dir, state, "probing")
    # Prefect calls the on_cancellation hook with the flow run (its parameters name the run)
    stop_latest_job(None, SimpleNamespace(parameters={"run_dir": str(run_dir)}, name="x"), None)
    for probe in probes:
        assert wait_final(backend, probe.job_name, timeout=30).status is JobStatus.Stopped


def test_a_spent_launch_budget_stops_the_held_probe_chosen_as_the_run(run_dir: Path) -> None:
    backend = LocalBackend(run_dir)
    probe = launch_held(backend, "probe-best")
    state = State().model_copy(update={"run_spec": probe.spec})
    history = state.history.model_copy(
        update={"attempts": [probe], "num_retraining": state.budgets.max_num_retraining}
    )
    chosen = PlannedChange(strategy="search_lr", reason="best probe", continue_job="probe-best")
    state = state.model_copy(update={"history": history, "planned_change": chosen})
    ended = train.fn(state, str(run_dir))
    assert ended.next_action is NextAction.end
    assert "max_num_retraining" in (ended.end_reason or "")
    assert wait_final(backend, "probe-best", timeout=30).status is JobStatus.Stopped


def test_probes_that_cannot_all_hold_stop_at_their_bound_so_none_waits_forever(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One GPU slot, two probes side by side: the first to lease it would hold at its bound
    keeping the GPU while the second waits for it, and the flow for the second (until the
    hold's 30-minute limit). Where the plan's probes cannot all hold at once
    (LocalBackend.room_beside), each stops at its bound instead: both run, one after the
    other, and neither is held. No GPU is needed: CUDA_VISIBLE_DEVICES names the device."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("REMEDY_GPU_LOCK_DIR", str(run_dir.parent / "locks"))
    monkeypatch.delenv("REMEDY_JOBS_PER_GPU", raising=False)
    candidate = ProbeCandidate(strategy="search_lr_up", reason="a rate", run_spec=spec("sgd"))
    with ThreadPoolExecutor(2) as pool:
        futures = [
            pool.submit(probe_task.fn, candidate, f"probe-{i}", str(run_dir), BOUND, 0.1)
            for i in range(2)
        ]
        probes = [future.result(timeout=120) for future in futures]
    assert [p.held for p in probes] == [False, False]
    assert all(p.steps_run == BOUND and p.outcome is JobStatus.Stopped for p in probes)


def test_a_held_probe_continued_to_a_further_bound_holds_there_again(run_dir: Path) -> None:
    """continue_job(until=N): the job takes the continue file away, trains on to N updates
    of its launch and holds there again; continued once more, it trains on to its end."""
    backend = LocalBackend(run_dir)
    backend.launch("probe-on", spec("sgd", max_updates=BOUND, hyperparameters={"steps": 9}))
    held_at(backend, "probe-on", BOUND)
    backend.continue_job("probe-on", until=6)
    held_at(backend, "probe-on", 6)
    assert "continued after 3 updates: on to 6, to hold again" in backend.logs("probe-on")
    backend.continue_job("probe-on")
    ended = wait_final(backend, "probe-on", timeout=60)
    assert ended.status is JobStatus.Completed and ended.progress is not None
    assert ended.progress.steps_run == 9


def held_at(backend: LocalBackend, name: str, updates: int) -> None:
    """Wait for the job to reach `updates` and see it stay there, still running."""
    deadline = time.monotonic() + 60
    while (snapshot := backend.describe(name)).progress is None or (
        snapshot.progress.steps_run < updates
    ):
        assert time.monotonic() < deadline and not snapshot.is_final, backend.logs(name)
        time.sleep(0.1)
    time.sleep(0.5)
    snapshot = backend.describe(name)
    assert snapshot.status is JobStatus.InProgress and snapshot.progress is not None
    assert snapshot.progress.steps_run == updates, backend.logs(name)


def test_a_round_of_probes_stops_the_one_outpaced_at_its_rung(
    run_dir: Path, prefect_api_url: str
) -> None:
    """Two probes of 20 updates, one at a rate that learns and one 50,000x smaller, run
    side by side on the local backend and hold at their rung (10 updates): the slow one
    has taken the loss down nothing like as far and is stopped there, outpaced; the other
    goes on to its bound and holds there, to be judged (tasks/probe.py: run_round)."""
    from prefect import flow

    from remedy.tasks.probe import run_round

    candidates = [
        ProbeCandidate(
            strategy="search_lr_up",
            reason=f"lr {lr:g}",
            run_spec=spec("sgd", hyperparameters={"lr": lr}),
        )
        for lr in (0.05, 1e-6)
    ]
    state = State(run_spec=spec("sgd"), probes=candidates)
    state = state.model_copy(
        update={"budgets": state.budgets.model_copy(update={"probe_steps": 20})}
    )

    @flow
    def one_round() -> tuple[list[Attempt], list[Attempt]]:
        return run_round(state, str(run_dir), 0.1)

    (learns, slow), reused = one_round()
    assert reused == []
    assert slow.result is not None and slow.result.kind is ResultKind.outpaced, slow
    assert "outpaced after 10 updates" in slow.result.summary
    assert (slow.steps_run, slow.outcome, slow.held) == (10, JobStatus.Stopped, False)
    assert slow.spec.max_updates == 20  # recorded at its bound: probed_before matches it
    assert learns.result is None and learns.held and learns.steps_run == 20
    backend = LocalBackend(run_dir)
    assert backend.describe(learns.job_name).status is JobStatus.InProgress
    assert "on to 20, to hold again" in backend.logs(learns.job_name)


def test_a_probe_that_goes_on_as_the_run_holds_where_a_launch_of_it_would(
    run_dir: Path,
) -> None:
    """The probe chosen as the run is asked where a launch of its spec would be: held at
    its bound (3 updates), it is continued to the run's next hold point past them (an
    eighth of its 400 updates: 50) and holds there (Attempt.hold_at), not let run to its
    end. A resumed flow's word again (ensure_launched) leaves it held there."""
    from remedy.tasks.train import ensure_launched

    backend = LocalBackend(run_dir)
    run = spec("sgd", hyperparameters={"steps": 400}, hyperparameter_roles={"max_steps": "steps"})
    probe_spec = run.model_copy(update={"max_updates": BOUND})
    backend.launch("probe-best", probe_spec)
    held_at(backend, "probe-best", BOUND)
    probe = Attempt(
        job_name="probe-best", spec=probe_spec, kind="probe", held=True, steps_run=BOUND
    )
    state = State(run_spec=run)
    history = state.history.model_copy(update={"attempts": [probe], "num_retraining": 1})
    chosen = PlannedChange(strategy="search_lr", reason="best probe", continue_job="probe-best")
    state = state.model_copy(update={"history": history, "planned_change": chosen})
    went_on = train.fn(state, str(run_dir))
    attempt = went_on.current_attempt
    assert attempt is not None and attempt.continues == "probe-best"
    assert attempt.hold_at == 50
    held_at(backend, "probe-best", 50)
    assert "continued after 3 updates: on to 50, to hold again" in backend.logs("probe-best")
    ensure_launched.fn(went_on, str(run_dir))  # a resume says it again
    held_at(backend, "probe-best", 50)
    assert "training on to the job's end" not in backend.logs("probe-best")
