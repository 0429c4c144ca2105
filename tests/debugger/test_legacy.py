"""Stores written by the legacy debugger library (real files, see fixtures/legacy/README.md)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from remedy.debugger import CorruptStepFile, Hook, ModeKeys, RuleStatus, SaveConfig, create_trial
from remedy.debugger.evaluator import RuleEvaluator
from remedy.debugger.exceptions import StoreFormatError
from remedy.debugger.readers import LegacyStoreReader
from remedy.debugger.rule_config import RuleConfig
from remedy.debugger.tfevents import read_events

from tests.debugger import scenarios as sc

FIXTURES = Path(__file__).parent / "fixtures" / "legacy"


def expected(name: str) -> dict[str, dict]:
    return json.loads((FIXTURES / f"{name}-expected.json").read_text())


@pytest.mark.parametrize("name", ["healthy", "exploding"])
def test_every_tensor_reads_as_the_legacy_library_reads_it(name: str) -> None:
    trial = create_trial(FIXTURES / name)
    assert isinstance(trial.reader, LegacyStoreReader)
    assert trial.has_ended
    truth = expected(name)
    seen = set()
    for tensor in trial.tensor_names():
        for mode in (ModeKeys.TRAIN, ModeKeys.EVAL):
            for step in trial.tensor(tensor).steps(mode):
                key = f"{mode.value}/{step}/{tensor}"
                value = trial.tensor(tensor).value(step, mode)
                want = truth[key]
                assert list(value.shape) == want["shape"], key
                got = [None if not np.isfinite(v) else v for v in value.astype(float).ravel()]
                assert [g is None for g in got] == [w is None for w in want["values"]], key
                finite = [(g, w) for g, w in zip(got, want["values"], strict=True) if w is not None]
                assert [g for g, _ in finite] == pytest.approx([w for _, w in finite], rel=1e-6)
                seen.add(key)
    assert seen == set(truth)  # nothing missed, nothing invented


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
        for key, value in truth.items()
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


def test_a_torn_legacy_record_is_never_decoded(tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(FIXTURES / "healthy", store)
    events = store / "events"
    torn = events / "000000000001" / "000000000001_worker_0.tfevents"
    torn.write_bytes(torn.read_bytes()[:300])  # the writer died mid-file
    flipped = events / "000000000002" / "000000000002_worker_0.tfevents"
    blob = bytearray(flipped.read_bytes())
    blob[0] ^= 0x01  # a record length that its checksum does not vouch for
    flipped.write_bytes(bytes(blob))
    trial = create_trial(store)
    index = json.loads((store / "index" / "000000000" / "000000000001_worker_0.json").read_text())
    beyond = [t["tensorname"] for t in index["tensor_payload"] if t["start_idx"] >= 300]
    assert beyond
    for name in beyond:
        with pytest.raises(CorruptStepFile, match="shorter|truncated"):
            trial.tensor(name).value(1)
    first = index["tensor_payload"][0]["tensorname"]
    assert trial.tensor(first).value(1).size > 0  # whole records before the tear still read
    index2 = json.loads((store / "index" / "000000000" / "000000000002_worker_0.json").read_text())
    with pytest.raises(CorruptStepFile, match="checksum"):
        trial.tensor(index2["tensor_payload"][0]["tensorname"]).value(2)


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
        assert loss == pytest.approx(truth[f"TRAIN/{step}/MSELoss_output_0"]["values"][0])


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


def test_a_legacy_store_of_default_mode_steps_is_an_error_not_empty(tmp_path: Path) -> None:
    """Issue 12: without set_mode() the legacy hook writes every step in mode GLOBAL (and its
    mode_step is the global step). Those index files, as the library writes them (the
    healthy fixture's, only their mode changed), must not read as an empty trial."""
    store_dir = tmp_path / "default_mode"
    shutil.copytree(FIXTURES / "healthy", store_dir)
    for index in sorted((store_dir / "index").rglob("*_worker_0.json")):
        data = json.loads(index.read_text())
        data["meta"]["mode"] = "GLOBAL"
        data["meta"]["mode_step"] = int(index.name.split("_")[0])
        index.write_text(json.dumps(data))
    with pytest.raises(StoreFormatError, match=r"index/000000000/000000000000_worker_0.json "
                       r"holds a step in mode GLOBAL .*set_mode"):  # fmt: skip
        create_trial(store_dir).steps()
