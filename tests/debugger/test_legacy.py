"""Stores written by the legacy debugger library (real files, see fixtures/legacy/README.md)."""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from remedy.debugger import CorruptStepFile, Hook, ModeKeys, RuleStatus, SaveConfig, create_trial
from remedy.debugger.evaluator import RuleEvaluator
from remedy.debugger.exceptions import (
    CorruptStoreFile,
    IncompleteStore,
    InvalidWorker,
    StoreFormatError,
    TensorUnavailableForStep,
)
from remedy.debugger.readers import LegacyStoreReader
from remedy.debugger.rule_config import RuleConfig
from remedy.debugger.tfevents import read_events
from tests.debugger import scenarios as sc

FIXTURES = Path(__file__).parent / "fixtures" / "legacy"


FIXTURE_NAMES = ["healthy", "exploding", "default_mode", "reductions", "regex", "workers"]


def expected(name: str) -> dict:
    """What the legacy library's own trial read from fixture `name` (make_fixtures.py)."""
    return json.loads((FIXTURES / f"{name}-expected.json").read_text())


def as_list(value: np.ndarray | float) -> list[float | None]:
    return [None if not np.isfinite(v) else v for v in np.asarray(value, float).ravel()]


def assert_same(got: list[float | None], want: list[float | None], key: str) -> None:
    assert [g is None for g in got] == [w is None for w in want], key
    finite = [(g, w) for g, w in zip(got, want, strict=True) if w is not None]
    assert [g for g, _ in finite] == pytest.approx([w for _, w in finite], rel=1e-6), key


@pytest.mark.parametrize("name", FIXTURE_NAMES)
def test_every_setting_reads_as_the_legacy_library_reads_it(name: str) -> None:
    """Workers, steps of every mode, global steps, collections, every tensor value and every
    saved reduction: the same as the legacy trial's, nothing missed, nothing invented."""
    trial = create_trial(FIXTURES / name)
    truth = expected(name)
    assert isinstance(trial.reader, LegacyStoreReader)
    assert trial.has_ended
    assert trial.workers() == truth["workers"]
    modes = [ModeKeys.GLOBAL, ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.PREDICT]
    # The legacy trial's mode for each of ours: the same, except in default mode (no
    # set_mode), where it lists GLOBAL steps only and we read them as TRAIN steps numbered
    # by their global step (the one documented difference).
    legacy = {mode: mode.value for mode in modes}
    if truth["steps"]["GLOBAL"] and not any(truth["steps"][m] for m in ("TRAIN", "EVAL")):
        legacy[ModeKeys.TRAIN] = "GLOBAL"
    for mode in modes:
        assert trial.steps(mode) == truth["steps"][legacy[mode]], mode
        for step, global_step in truth["global_steps"].get(legacy[mode], {}).items():
            assert trial.step_header(int(step), mode).global_step == global_step
    for collection, names in truth["collections"].items():
        assert trial.tensor_names(collection=collection) == names, collection
    seen_values, seen_reductions = set(), set()
    for tensor in trial.tensor_names():
        view = trial.tensor(tensor)
        for mode in modes:
            for step in view.steps(mode):
                for worker in view.workers(step, mode):
                    key = f"{legacy[mode]}/{step}/{worker}/{tensor}"
                    want = truth["tensors"][key]
                    seen_values.add(key)
                    if want is None:  # only its reductions were saved
                        with pytest.raises(TensorUnavailableForStep):
                            view.value(step, mode, worker=worker)
                    else:
                        value = view.value(step, mode, worker=worker)
                        assert list(value.shape) == want["shape"], key
                        assert_same(as_list(value), want["values"], key)
                    saved = [k for k in truth["reductions"] if k.startswith(f"{key}/")]
                    for rkey in saved:
                        label = rkey.rpartition("/")[2]
                        reduction = label.removeprefix("abs_")
                        got = view.reduction_value(
                            step, reduction, mode, abs=label != reduction, worker=worker
                        )
                        assert_same(as_list(got), [truth["reductions"][rkey]], rkey)
                        seen_reductions.add(rkey)
    assert seen_values == set(truth["tensors"])
    assert seen_reductions == set(truth["reductions"])


def test_legacy_settings_are_really_exercised() -> None:
    """Each fixture holds what its setting is about (so the comparison above compares it)."""
    default_mode = expected("default_mode")
    assert default_mode["steps"]["TRAIN"] == [] and default_mode["steps"]["GLOBAL"] == [0, 1, 2, 3]
    reductions = expected("reductions")
    labels = {key.rpartition("/")[2] for key in reductions["reductions"]}
    assert {"mean", "max", "l2", "abs_mean", "abs_l2", "variance", "prod"} <= labels
    assert None in reductions["tensors"].values()  # reductions alone, no raw tensor
    regex = expected("regex")
    assert regex["collections"]["relu_output"] == ["1_output_0"]
    assert "Sequential_0.weight" not in regex["collections"]["weights"]
    workers = expected("workers")
    assert workers["workers"] == ["worker_0", "worker_1"]
    loss = [workers["tensors"][f"TRAIN/0/{w}/MSELoss_output_0"] for w in workers["workers"]]
    assert loss[0] != loss[1]  # each rank trained on its own data


def test_several_legacy_workers_read_as_ours() -> None:
    trial = create_trial(FIXTURES / "workers")
    assert trial.num_workers == 2
    loss = trial.tensor("MSELoss_output_0")
    assert loss.workers(1) == ["worker_0", "worker_1"]
    part = trial.worker("worker_1")
    assert part.steps() == [0, 1]
    own = part.tensor("MSELoss_output_0").value(1)
    assert float(own) == float(loss.value(1, worker="worker_1")) != float(loss.value(1))
    with pytest.raises(InvalidWorker):
        loss.value(1, worker="worker_2")


def test_legacy_steps_modes_and_collections() -> None:
    trial = create_trial(FIXTURES / "healthy")
    assert trial.steps() == [0, 1, 2]
    assert trial.steps(ModeKeys.EVAL) == [0, 1]
    assert trial.steps(ModeKeys.GLOBAL) == [0, 1, 2, 3, 4]
    assert trial.step_header(1, ModeKeys.EVAL).global_step == 4
    assert trial.tensor_names(collection="gradients") == [
        "gradient/Sequential_0.bias",
        "gradient/Sequential_0.weight",
        "gradient/Sequential_2.bias",
        "gradient/Sequential_2.weight",
    ]
    assert trial.tensor_names(collection="losses") == ["MSELoss_output_0"]
    view = trial.tensor("gradient/Sequential_0.weight")
    assert view.reduction_value(2, "l2") == pytest.approx(float(np.linalg.norm(view.value(2))))


def test_rules_run_over_a_legacy_store(tmp_path: Path) -> None:
    truth = expected("exploding")
    first_bad = min(
        int(key.split("/")[1])
        for key, value in truth["tensors"].items()
        if key.startswith("TRAIN/") and "/gradient/" in key and None in value["values"]
    )
    configs = [
        RuleConfig("Explodes", "ExplodingTensor", {"tensor_regex": "gradient/.*"}),
        RuleConfig("LossUp", "LossNotDecreasing", {"num_steps": 2}),
    ]
    evaluator = RuleEvaluator(create_trial(FIXTURES / "exploding"), configs, tmp_path, log=print)
    evaluator.start()
    assert evaluator.poll()
    record = evaluator.statuses["Explodes"]
    assert record.status is RuleStatus.ISSUES_FOUND
    assert record.step == first_bad
    assert evaluator.statuses["LossUp"].status is not RuleStatus.ERROR


@pytest.mark.parametrize("name", ["default_mode", "workers"])
def test_rules_read_default_mode_and_several_workers(tmp_path: Path, name: str) -> None:
    """Default-mode steps read as TRAIN and every worker's part reach the rules."""
    trial = create_trial(FIXTURES / name)
    configs = [RuleConfig("Explodes", "ExplodingTensor", {"tensor_regex": "gradient/.*"})]
    evaluator = RuleEvaluator(trial, configs, tmp_path, log=print)
    evaluator.start()
    assert evaluator.poll()
    assert evaluator.statuses["Explodes"].status is RuleStatus.NO_ISSUES_FOUND
    assert all(trial.worker(w).tensor_reads > 0 for w in trial.workers())  # each was read


def test_a_torn_legacy_record_is_never_decoded(tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(FIXTURES / "healthy", store)
    events = store / "events"
    flipped = events / "000000000002" / "000000000002_worker_0.tfevents"
    index2 = json.loads((store / "index" / "000000000" / "000000000002_worker_0.json").read_text())
    second = index2["tensor_payload"][1]
    blob = bytearray(flipped.read_bytes())
    blob[second["start_idx"]] ^= 0x01  # a record length that its checksum does not vouch for
    flipped.write_bytes(bytes(blob))
    trial = create_trial(store)
    with pytest.raises(CorruptStepFile, match="checksum"):
        trial.tensor(second["tensorname"]).value(2)
    blob[0] ^= 0x01  # the first record's: the step's time is read from it
    flipped.write_bytes(bytes(blob))
    with pytest.raises(CorruptStepFile, match=f"{flipped}: record length checksum mismatch"):
        create_trial(store)  # its step is reported
    torn = events / "000000000001" / "000000000001_worker_0.tfevents"
    torn.write_bytes(torn.read_bytes()[:300])  # the writer died mid-file
    with pytest.raises(CorruptStepFile, match=f"{torn}: 300 bytes, but its index names"):
        create_trial(store)  # its step is reported, never read in part


def test_a_legacy_store_s_missing_steps_are_named(tmp_path: Path) -> None:
    """As for an old store of ours: the steps its collections' save_config makes due, per
    worker; GLOBAL steps (read as TRAIN) by the GLOBAL save_config."""
    workers = tmp_path / "workers"
    shutil.copytree(FIXTURES / "workers", workers)
    (workers / "index" / "000000000" / "000000000000_worker_1.json").unlink()
    with pytest.raises(IncompleteStore, match=r"call for 1 TRAIN step\(s\) with no .*: 0$"):
        create_trial(workers)
    default = tmp_path / "default_mode"
    shutil.copytree(FIXTURES / "default_mode", default)
    collections = default / "collections" / "000000000" / "worker_0_collections.json"
    data = json.loads(collections.read_text())
    for entry in data["collections"].values():
        entry["save_config"]["TRAIN"]["save_interval"] = 2  # the hook saved by GLOBAL's
    collections.write_text(json.dumps(data))
    assert create_trial(default).steps() == [0, 1, 2, 3]
    (default / "index" / "000000000" / "000000000001_worker_0.json").unlink()
    with pytest.raises(IncompleteStore, match=r"call for 1 TRAIN step\(s\) with no .*: 1$"):
        create_trial(default)


def test_a_legacy_step_s_time_is_its_first_record_s(tmp_path: Path) -> None:
    """Copying a store (or touching it) changes its files' mtimes, never its steps' times."""
    store = tmp_path / "store"
    shutil.copytree(FIXTURES / "workers", store)
    for path in store.rglob("*.tfevents"):
        os.utime(path, (0, 0))
    trial = create_trial(store)
    for worker in trial.workers():
        for mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
            for step in trial.worker(worker).steps(mode):
                header = trial.worker(worker).step_header(step, mode)
                events = store / "events" / f"{header.global_step:012d}"
                first = next(read_events(events / f"{header.global_step:012d}_{worker}.tfevents"))
                assert header.wall_time == first.wall_time > 1.7e9


def test_legacy_tensorboard_events_are_readable() -> None:
    truth = expected("healthy")
    scalars = {}
    for path in sorted((FIXTURES / "healthy" / "tensorboard" / "TRAIN").iterdir()):
        for event in read_events(path):
            for value in event.values:
                if value.simple_value is not None:
                    scalars[event.step] = value.simple_value
                if value.histogram is not None:
                    assert value.histogram["num"] > 0
    assert sorted(scalars) == [0, 1, 2]
    for step, loss in scalars.items():
        want = truth["tensors"][f"TRAIN/{step}/worker_0/MSELoss_output_0"]["values"][0]
        assert loss == pytest.approx(want)


def test_our_tensorboard_export_round_trips(tmp_path: Path) -> None:
    every = SaveConfig(save_interval=1)
    hook = Hook(
        tmp_path / "store",
        collections={"losses": every, "gradients": every},
        tensorboard_dir=tmp_path / "tb",
    )
    run = sc.mlp([4, 8, 1])
    criterion = torch.nn.MSELoss()
    opt = torch.optim.SGD(run.parameters(), lr=0.05)
    hook.register_module(run)
    hook.register_loss(criterion)
    hook.register_optimizer(opt)
    x, y = sc.regression(16)
    losses, grads = [], []
    for _ in range(3):
        opt.zero_grad()
        loss = criterion(run(x), y)
        loss.backward()
        losses.append(loss.item())
        grads.append(run[0].weight.grad.clone().numpy())
        opt.step()
    hook.close()
    (path,) = (tmp_path / "tb" / "TRAIN").glob("events.out.tfevents.*")
    events = list(read_events(path))
    scalars = {e.step: v.simple_value for e in events for v in e.values if v.tag == "loss"}
    assert scalars == {s: pytest.approx(v, rel=1e-6) for s, v in enumerate(losses)}
    histograms = {
        e.step: v.histogram for e in events for v in e.values if v.tag == "gradient/0.weight"
    }
    assert sorted(histograms) == [0, 1, 2]
    for step, histogram in histograms.items():
        assert histogram is not None
        assert histogram["num"] == grads[step].size
        assert histogram["min"] == pytest.approx(grads[step].min())
        assert histogram["sum"] == pytest.approx(grads[step].sum(), rel=1e-5, abs=1e-6)
        assert sum(histogram["bucket"]) == grads[step].size


def _edit_index(store_dir: Path, step: int, edit: Callable[[dict], None]) -> Path:
    path = store_dir / "index" / "000000000" / f"{step:012d}_worker_0.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return path


def _mode(mode: str) -> Callable[[dict], None]:
    return lambda data: data["meta"].update(mode=mode)


def _first_tensor(tag: str) -> Callable[[dict], None]:
    return lambda data: data["tensor_payload"][0].update(tensorname=tag)


def _rename_worker(store_dir: Path) -> Path:
    index = store_dir / "index" / "000000000" / "000000000001_worker_0.json"
    return index.rename(index.with_name("000000000001__replica-0_task-0_device-GPU-0.json"))


def _drop_collections(store_dir: Path) -> Path:
    path = store_dir / "collections" / "000000000" / "worker_0_collections.json"
    path.unlink()
    return path.parent


def _garble(store_dir: Path) -> Path:
    path = store_dir / "index" / "000000000" / "000000000002_worker_0.json"
    path.write_text('{"meta": {"mode": "TRAIN", ')  # torn, and the job has ended
    return path


@pytest.mark.parametrize(
    ("fixture", "damage", "error", "what"),
    [
        # GLOBAL steps read as TRAIN: a store with both cannot tell them apart.
        ("healthy", lambda d: _edit_index(d, 1, _mode("GLOBAL")), StoreFormatError, "GLOBAL"),
        ("healthy", lambda d: _edit_index(d, 1, _mode("TRAINING")), StoreFormatError, "TRAINING"),
        ("healthy", lambda d: _edit_index(d, 2, lambda x: x.pop("meta")), StoreFormatError, "meta"),
        (
            "reductions",
            lambda d: _edit_index(d, 1, _first_tensor("smdebug/reductions/median/x")),
            StoreFormatError,
            "median",
        ),
        ("regex", _rename_worker, StoreFormatError, "replica"),
        ("regex", _drop_collections, CorruptStoreFile, "no collections file"),
        ("regex", _garble, CorruptStoreFile, "not an index file"),
        (
            "workers",
            lambda d: (
                (d / "collections/000000000/worker_1_collections.json").unlink()
                or d / "collections/000000000/worker_1_collections.json"
            ),
            CorruptStoreFile,
            "missing",
        ),
    ],
)
def test_a_legacy_store_the_reader_cannot_interpret_is_an_error_naming_the_file(
    tmp_path: Path, fixture: str, damage: Callable[[Path], Path], error: type, what: str
) -> None:
    """Issue 12: never an empty (or partly read) trial; the error names the file."""
    store_dir = tmp_path / fixture
    shutil.copytree(FIXTURES / fixture, store_dir)
    culprit = damage(store_dir)
    with pytest.raises(error, match=re.escape(str(culprit)) + ".*" + what):
        trial = create_trial(store_dir)
        trial.steps()
        for name in trial.tensor_names():
            trial.tensor(name).values()


def test_a_tensor_saved_as_its_shape_alone_is_an_error(tmp_path: Path) -> None:
    """save_shape=True writes a shape and no value: reading it as absent would be silent."""
    store_dir = tmp_path / "shapes"
    shutil.copytree(FIXTURES / "healthy", store_dir)
    path = _edit_index(
        store_dir,
        0,
        lambda data: data.update(
            shape_payload=[{"tensorname": "1_output_0", "originalname": "1_output_0", "shape": [8]}]
        ),
    )
    with pytest.raises(StoreFormatError, match=re.escape(str(path)) + ".*shape of 1_output_0"):
        create_trial(store_dir)


def test_a_running_legacy_job_is_followed(tmp_path: Path) -> None:
    """The writer adds its collections file after the first step's index: until then the
    trial waits (no error, no steps), then reads what is there."""
    store_dir = tmp_path / "running"
    shutil.copytree(FIXTURES / "healthy", store_dir)
    (store_dir / "training_job_end.ts").unlink()
    collections = store_dir / "collections" / "000000000" / "worker_0_collections.json"
    saved = collections.read_bytes()
    collections.unlink()
    trial = create_trial(store_dir)
    assert trial.steps() == [] and not trial.has_ended
    collections.write_bytes(saved)
    trial.refresh()
    assert trial.steps() == [0, 1, 2] and trial.steps(ModeKeys.EVAL) == [0, 1]
    assert not trial.has_ended
    (store_dir / "training_job_end.ts").touch()
    trial.refresh()
    assert trial.has_ended
