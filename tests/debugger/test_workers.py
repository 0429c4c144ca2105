"""Stores written by several processes (torchrun): one part per worker, read as one trial.

Each "process" here is a real Hook built with torchrun's RANK and WORLD_SIZE in the
environment and trained for real (a healthy learning rate on one worker, an exploding one on
the other); the end-to-end test with a real two-process DDP job is in
tests/jobs/test_distributed.py.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from remedy.debugger import (
    CorruptStepFile,
    Hook,
    InvalidWorker,
    RuleStatus,
    StoreFormatError,
    create_trial,
    read_statuses,
    store,
)
from remedy.debugger.evaluator import RuleEvaluator
from remedy.debugger.rule_config import RuleConfig
from tests.debugger.helpers import EXPLODING_LR, every_step_hook, train


def worker_hook(out_dir: Path, rank: int, monkeypatch: pytest.MonkeyPatch) -> Hook:
    """The hook rank `rank` of two builds under torchrun."""
    monkeypatch.setenv("RANK", str(rank))
    monkeypatch.setenv("WORLD_SIZE", "2")
    return every_step_hook(out_dir)


def exploding_rule() -> RuleConfig:
    return RuleConfig.from_dict(
        {
            "name": "GradientsExplode",
            "rule": "ExplodingTensor",
            "parameters": {"tensor_regex": ".*gradient"},
            "actions": ["StopTraining"],
        }
    )


def test_each_worker_writes_its_own_part(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    for rank in (0, 1):
        hook = worker_hook(root, rank, monkeypatch)
        assert hook.worker == f"worker_{rank}"
        train(hook, steps=3)
        hook.close()
    meta = json.loads((root / "meta.json").read_text())
    assert meta["workers"] == 2 and meta["version"] == store.WORKERS_FORMAT_VERSION
    for rank in (0, 1):
        part = root / "workers" / f"worker_{rank}"
        files = [store.parse_steps_folder_name(p.name) for p in (part / "steps/TRAIN").iterdir()]
        assert sorted(s for f in files if f for s in range(f.first, f.last + 1)) == [0, 1, 2]
        assert (part / "end.json").is_file()
    assert not (root / "steps").exists() and not (root / "end.json").exists()
    assert store.has_ended(root)


def test_a_trial_reads_every_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "store"
    hooks = [worker_hook(root, rank, monkeypatch) for rank in (0, 1)]
    logs = [train(hooks[0], steps=4, seed=0), train(hooks[1], steps=2, seed=1)]
    hooks[0].close()
    hooks[1].flush()  # worker_1 is behind and still running: no end marker yet

    trial = create_trial(root)
    assert trial.workers() == ["worker_0", "worker_1"] and trial.num_workers == 2
    # steps no worker may still write: worker_1 may still write steps 2 and 3
    assert trial.steps() == [0, 1]
    assert trial.steps(show_incomplete_steps=True) == [0, 1, 2, 3]
    assert not trial.has_ended and not store.has_ended(root)
    loss = trial.tensor("loss")
    assert loss.workers(1) == ["worker_0", "worker_1"]
    assert float(loss.value(1)) == pytest.approx(logs[0].losses[1])  # the first worker's
    assert float(loss.value(1, worker="worker_1")) == pytest.approx(logs[1].losses[1])
    with pytest.raises(InvalidWorker, match="worker_7"):
        loss.value(1, worker="worker_7")
    assert trial.worker("worker_0").steps() == [0, 1, 2, 3]
    assert trial.worker("worker_1").steps() == [0, 1]
    assert "gradient/0.weight" in trial.tensor_names(collection="gradients")

    hooks[1].close()
    trial.refresh()
    assert trial.has_ended and store.has_ended(root)
    assert trial.steps() == [0, 1, 2, 3]  # worker_1 ended: nothing more will come
    assert set(loss.values(worker="worker_1")) == {0, 1}


def test_a_step_file_moved_to_another_worker_is_named_not_read_as_its(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both workers write the same steps under the same file names: only the worker each
    file names tells one's from the other's."""
    root = tmp_path / "store"
    for rank in (0, 1):
        hook = worker_hook(root, rank, monkeypatch)
        train(hook, steps=3, seed=rank)
        hook.close()
    parts = [root / "workers" / f"worker_{rank}" / "steps" / "TRAIN" for rank in (0, 1)]
    assert create_trial(root / "workers" / "worker_1").steps() == [0, 1, 2]  # read on its own
    shutil.rmtree(parts[1])
    shutil.copytree(parts[0], parts[1])  # the same steps, worker_0's
    with pytest.raises(CorruptStepFile, match="written by worker_0, not worker_1"):
        create_trial(root)


def test_a_store_of_one_process_is_unchanged(tmp_path: Path) -> None:
    root = tmp_path / "store"
    hook = every_step_hook(root)
    assert hook.worker == "worker_0"
    train(hook, steps=2)
    hook.close()
    assert (root / "steps" / "TRAIN").is_dir() and not (root / "workers").exists()
    assert json.loads((root / "meta.json").read_text())["version"] == store.FORMAT_VERSION
    trial = create_trial(root)
    assert trial.workers() == ["worker_0"] and trial.worker("worker_0") is trial
    assert trial.tensor("loss").workers(0) == ["worker_0"]
    with pytest.raises(InvalidWorker):
        trial.worker("worker_1")


def test_a_newer_layout_is_refused_not_read_as_empty(tmp_path: Path) -> None:
    root = tmp_path / "store"
    newer = store.NEWEST_FORMAT_VERSION + 1
    store.write_json(root / "meta.json", {"format": store.FORMAT_NAME, "version": newer})
    with pytest.raises(StoreFormatError, match=f"version {newer}"):
        create_trial(root)


def test_a_rule_firing_on_any_worker_stops_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, status_dir, stop_file = tmp_path / "store", tmp_path / "status", tmp_path / "stop"
    evaluator = RuleEvaluator(
        create_trial(root), [exploding_rule()], status_dir, stop_file, log=lambda line: None
    )
    evaluator.start()
    healthy, exploding = (worker_hook(root, rank, monkeypatch) for rank in (0, 1))
    train(healthy, steps=8)
    log = train(exploding, steps=8, lr=EXPLODING_LR)  # real divergence, on worker_1 only
    assert not any(np.isnan(g).any() for g in log.grads[0].values())
    healthy.close()
    exploding.close()

    evaluator.poll()
    record = read_statuses(status_dir)["GradientsExplode"]
    assert record.status is RuleStatus.ISSUES_FOUND
    assert record.worker == "worker_1"
    assert record.details.endswith(", on worker_1")
    assert json.loads(stop_file.read_text())["worker"] == "worker_1"
    trial = create_trial(root)
    grads = trial.tensor_names(collection="gradients")
    assert all(
        np.isfinite(trial.tensor(name).value(step, worker="worker_0")).all()
        for name in grads
        for step in trial.worker("worker_0").steps()
    )


def test_no_issues_only_once_every_worker_has_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, status_dir = tmp_path / "store", tmp_path / "status"
    evaluator = RuleEvaluator(
        create_trial(root), [exploding_rule()], status_dir, log=lambda line: None
    )
    evaluator.start()
    hooks = [worker_hook(root, rank, monkeypatch) for rank in (0, 1)]
    for rank, hook in enumerate(hooks):
        train(hook, steps=3, seed=rank)
    hooks[0].close()
    hooks[1].flush()
    assert not evaluator.poll()  # worker_1 may still write
    record = read_statuses(status_dir)["GradientsExplode"]
    assert record.status is RuleStatus.IN_PROGRESS and record.steps_evaluated == 3
    hooks[1].close()
    assert evaluator.poll()
    record = read_statuses(status_dir)["GradientsExplode"]
    assert record.status is RuleStatus.NO_ISSUES_FOUND
    assert record.details == "No issues found in 3 steps (2 workers)"
    assert record.worker is None
    assert "worker" not in json.loads((status_dir / "GradientsExplode.json").read_text())
