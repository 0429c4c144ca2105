"""Where a new launch holds to be asked whether its model has begun to learn (tasks/train.py:
hold_for_question; an eighth, a quarter and half of its length, tasks/stop.py: let_go_on): a
cold start of known length, under a policy that probes, on a backend
that can continue a held job and has room for a round of probes beside it. No GPU is
needed: the devices the local backend hands out are CUDA_VISIBLE_DEVICES's entries."""

from __future__ import annotations

from pathlib import Path

import pytest

from remedy.jobs.local import LocalBackend
from remedy.jobs.slurm.backend import SlurmBackend
from remedy.state_schema import Budgets, RunSpec, State
from remedy.state_schema.transitions import begin_attempt, update_current_attempt
from remedy.strategies.search_lr import ROUND
from remedy.tasks.stop import let_go_on
from remedy.tasks.train import hold_for_question, launched_spec
from remedy.training.stopping import continued_until


def stated(**fields: object) -> RunSpec:
    """A script stating its length (400 updates), with `fields`."""
    return RunSpec(
        entry_point="train.py",
        hyperparameters={"max-steps": 400, "lr": 1e-4},
        hyperparameter_roles={"max_steps": "max-steps", "learning_rate": "lr"},
        **fields,
    )


STATED = stated()


@pytest.fixture
def no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")


def test_a_cold_start_of_known_length_holds_at_an_eighth_a_quarter_and_half(
    tmp_path: Path, no_gpu: None
) -> None:
    """Held at an eighth first (the launch bounded there); let go on, it is told to hold at
    the quarter, then at half (the continue file names the next bound: the job trains on
    to it and holds again, training/stopping.py), then to train on to its end."""
    state = State(run_spec=STATED)
    assert hold_for_question(state, str(tmp_path)) == {"hold_at": 50}
    launched = update_current_attempt(begin_attempt(state, "job-1"), hold_at=50)
    assert launched_spec(launched).max_updates == 50  # the launch is bounded there
    assert launched.run_spec.max_updates is None  # the run's spec is not
    backend = LocalBackend(tmp_path)
    continue_file = backend.paths("job-1").continue_request
    held = launched
    for further in (100, 200, None):
        continue_file.unlink(missing_ok=True)  # the job takes a bound's file away
        held = let_go_on(held, backend, "job-1")
        assert held.current_attempt is not None and held.current_attempt.hold_at == further
        assert continued_until(continue_file) == further
    for no in (
        state.model_copy(update={"policy": "seed"}),  # a policy that never probes
        state.model_copy(update={"budgets": Budgets(probe_steps=0)}),
        State(run_spec=RunSpec(entry_point="train.py")),  # its length not known
    ):
        assert hold_for_question(no, str(tmp_path)) == {}


def test_a_job_on_gpus_holds_only_where_a_round_of_probes_has_devices_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A held job keeps its GPU: on one device the probes would wait for it, and it for
    them. room_beside: the devices (times REMEDY_JOBS_PER_GPU) take it and `others`; a run
    holds at half where one probe at a time gets through beside it."""
    backend = LocalBackend(tmp_path)
    monkeypatch.delenv("REMEDY_JOBS_PER_GPU", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert not backend.room_beside(STATED, ROUND)
    assert hold_for_question(State(run_spec=STATED), str(tmp_path)) == {}  # no probe beside
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert hold_for_question(State(run_spec=STATED), str(tmp_path)) == {
        "hold_at": 50
    }  # one at a time
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("REMEDY_JOBS_PER_GPU", str(1 + ROUND))
    assert backend.room_beside(STATED, ROUND)
    monkeypatch.delenv("REMEDY_JOBS_PER_GPU")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", ",".join(map(str, range(1 + ROUND))))
    assert backend.room_beside(STATED, ROUND)
    two_each = stated(local={"gpus_per_job": 2})
    assert not backend.room_beside(two_each, ROUND)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert backend.room_beside(STATED, ROUND)  # no GPU: nothing held but its process


def test_a_slurm_job_with_gpus_is_not_held(tmp_path: Path) -> None:
    """Its allocation waiting could leave the probes queued behind it."""
    backend = SlurmBackend(tmp_path)
    on_cpus = stated(backend="slurm")
    assert backend.room_beside(on_cpus, ROUND)
    on_gpus = stated(backend="slurm", slurm={"gpus_per_node": 1})
    assert not backend.room_beside(on_gpus, ROUND)


def counting_epochs(epochs: int, **fields: object) -> RunSpec:
    """A script whose length is its epochs flag over a DataLoader (no epoch stated)."""
    return RunSpec(
        entry_point="train.py",
        hyperparameters={"epochs": epochs, "lr": 1e-4},
        hyperparameter_roles={"num_epochs": "epochs", "learning_rate": "lr"},
        **fields,
    )


def test_a_length_counted_in_epochs_is_held_by_its_job_then_at_the_next_point(
    tmp_path: Path, no_gpu: None
) -> None:
    """Its length is known once the job measured an epoch: the launch tells the job to hold
    by its epochs (hold_by_epochs), and the job says where (the monitor records it with
    the epoch: decisions/observe.py with_job_hold); let go on, it is told to hold at half,
    then to train on to its end. Two epochs' half is the first epoch's end, past once
    measured; an epoch stated is a known length (hold_point)."""
    state = State(run_spec=counting_epochs(8))
    assert hold_for_question(state, str(tmp_path)) == {"holds_by_its_epochs": True}
    launched = update_current_attempt(begin_attempt(state, "job-1"), holds_by_its_epochs=True)
    spec = launched_spec(launched)
    assert spec.hold_by_epochs == 8 and spec.max_updates is None
    assert launched.run_spec.hold_by_epochs is None  # the run's spec is not told
    said = update_current_attempt(launched, hold_at=86, holds_by_its_epochs=False, epoch_updates=43)
    backend = LocalBackend(tmp_path)
    continue_file = backend.paths("job-1").continue_request
    for further in (172, None):  # a quarter of 8 x 43 said by the job, then half, then its end
        continue_file.unlink(missing_ok=True)
        said = let_go_on(said, backend, "job-1")
        assert said.current_attempt is not None and said.current_attempt.hold_at == further
        assert continued_until(continue_file) == further
    for no in (
        State(run_spec=counting_epochs(2)),
        State(run_spec=counting_epochs(8, init_checkpoint="ckpt/")),  # a warm start
        state.model_copy(update={"policy": "seed"}),
    ):
        assert hold_for_question(no, str(tmp_path)) == {}
    stated_epoch = State(run_spec=counting_epochs(8, updates_per_epoch=45))
    assert hold_for_question(stated_epoch, str(tmp_path)) == {"hold_at": 45}  # an eighth
