"""The NaN guard in a real job: corrupt data and an unstable learning rate, caught and replayed."""

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from remedy.state_schema import Hyperparameters
from remedy.training.bundle import BundleError, read_bundle, write_manifest
from remedy.training.guard import RULE_STATUS_DIR_ENV, batch_of_step
from remedy.training.replay import debug, replay
from remedy.training.train import train
from tests.helpers.builtin_job import REPO, TINY, UNSTABLE, read_metrics, run_job, strict_json
from tests.helpers.cifar import BAD_SAMPLE, corrupt_cifar

CORRUPT = TINY | {"num_epochs": 2, "dataset": "cifar10", "checkpoint_every_epochs": 1}


def rule_status(out: Path) -> dict[str, Any]:
    return strict_json((out / "rule_status" / "NonFiniteGradient.json").read_text())


def all_finite(tensors: dict[str, torch.Tensor]) -> bool:
    return all(torch.isfinite(t).all() for t in tensors.values() if t.is_floating_point())


@pytest.fixture(scope="module")
def corrupt_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("corrupt")
    data = corrupt_cifar(tmp / "cifar")
    done = run_job(tmp, CORRUPT | {"data_path": str(data)})
    assert done.returncode == 0, done.stderr
    return tmp / "out"


@pytest.fixture(scope="module")
def unstable_job(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("unstable")
    done = run_job(tmp, UNSTABLE)
    assert done.returncode == 0, done.stderr
    return tmp / "out"


def test_a_corrupt_sample_is_caught_at_its_step_and_named(corrupt_job: Path) -> None:
    out = corrupt_job
    result = strict_json((out / "result.json").read_text())
    assert result["status"] == "Stopped"
    # The step that stopped is the one whose batch (by the contact trace) holds the sample.
    step = result["steps"]
    assert BAD_SAMPLE in batch_of_step(out, step)
    assert all(BAD_SAMPLE not in batch_of_step(out, s) for s in range(1, step))

    status = rule_status(out)
    assert status["RuleEvaluationStatus"] == "IssuesFound" and status["step"] == step
    assert status["suspect_samples"] == [BAD_SAMPLE]
    assert status["suspect_shards"] == ["data_batch_2:3"]
    assert status["localisation"] == "forward stem"  # the first conv meets the inf pixel
    assert status["data_problem"] is None  # one failure: a suspect, not yet a data problem
    # It asked to stop as a StopTraining action does (the job's REMEDY_STOP_FILE is out/stop).
    assert strict_json((out / "stop").read_text())["requested_by"] == "nan_guard"

    bundle = read_bundle(status["bundle"])
    assert bundle.meta["step"] == step and bundle.meta["nonfinite"]["loss"]
    assert bundle.sample_ids.tolist() == batch_of_step(out, step)
    assert bundle.meta["samples"]["shards"][bundle.sample_ids.tolist().index(BAD_SAMPLE)] == (
        "data_batch_2:3"
    )
    assert not torch.isfinite(bundle.images).all()  # the batch as it was, inf included
    # The update was skipped: the state saved is finite (weights and batch-norm statistics).
    assert all_finite(load_file(bundle.state_path / "model.safetensors"))
    steps = [line for line in read_metrics(out) if line["type"] == "step"]
    assert steps[-1]["step"] == step and steps[-1]["loss"] is None


def test_the_corrupt_bundle_replays_to_the_same_module(corrupt_job: Path) -> None:
    status = rule_status(corrupt_job)
    replayed = replay(status["bundle"])
    assert replayed.reproduced and replayed.loss is None
    assert replayed.localisation == status["localisation"]
    assert replayed.forward is not None and replayed.forward.stats["posinf"] > 0
    assert replayed.forward.input_stats is not None and replayed.forward.input_stats["posinf"] == 1
    assert replayed.suspect_samples == [BAD_SAMPLE]


def test_an_unstable_learning_rate_is_caught_as_a_model_problem(unstable_job: Path) -> None:
    out = unstable_job
    result = strict_json((out / "result.json").read_text())
    status = rule_status(out)
    assert result["status"] == "Stopped" and status["step"] == result["steps"] > 1
    assert status["suspect_samples"] == []  # every sample fails: not a data problem
    assert status["localisation"] and status["localisation"] != "forward stem"
    bundle = read_bundle(status["bundle"])
    assert torch.isfinite(bundle.images).all()  # the data is fine ...
    assert all_finite(load_file(bundle.state_path / "model.safetensors"))  # ... and the weights
    replayed = replay(status["bundle"])
    assert replayed.reproduced and replayed.localisation == status["localisation"]
    # The state before the step was finite, so the previous steps' losses were too.
    losses = [line["loss"] for line in read_metrics(out) if line["type"] == "step"]
    assert all(loss is not None for loss in losses[:-1]) and losses[-1] is None


def test_skip_mode_goes_on_and_reports_repeated_samples_as_bad_data(tmp_path: Path) -> None:
    data = corrupt_cifar(tmp_path / "cifar")
    config = CORRUPT | {"data_path": str(data), "nan_guard": "skip", "num_epochs": 3}
    done = run_job(tmp_path, config)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    result = strict_json((out / "result.json").read_text())
    assert result["status"] == "Completed" and result["final_loss"] is not None
    status = rule_status(out)
    assert status["RuleEvaluationStatus"] == "NoIssuesFound"
    assert status["bad_batches"] == 3  # the sample is met once per epoch
    # the run's final word: every step checked, the latest bad one's batch holds the sample
    assert status["steps_evaluated"] == result["steps"]
    assert BAD_SAMPLE in batch_of_step(out, status["step"])
    assert "run ended, those updates skipped" in status["StatusDetails"]
    assert status["localisation"] == "forward stem" and status["bundle"]
    assert status["data_problem"]["samples"] == [BAD_SAMPLE]
    assert status["data_problem"]["shards"] == ["data_batch_2:3"]
    assert status["data_problem"]["failures"] == 3
    checkpoint = out / "checkpoints" / "epoch-0003" / "model.safetensors"
    assert all_finite(load_file(checkpoint))
    assert len(list((out / "repro").iterdir())) == 1  # one bundle: the first bad batch


def test_excluded_samples_are_left_out(tmp_path: Path) -> None:
    data = corrupt_cifar(tmp_path / "cifar")
    config = CORRUPT | {"data_path": str(data), "exclude_samples": [BAD_SAMPLE]}
    done = run_job(tmp_path, config)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    result = strict_json((out / "result.json").read_text())
    assert result["status"] == "Completed" and not (out / "rule_status").exists()
    epoch_0 = {i for step in range(1, result["steps"] // 2 + 1) for i in batch_of_step(out, step)}
    assert epoch_0 == set(range(CORRUPT["train_samples"])) - {BAD_SAMPLE}


@pytest.mark.parametrize(
    "damage",
    [
        "truncate_model",
        "flip_batch",
        "drop_rng",
        "garble_manifest",
        "edit_manifest",
        "edit_step_checksum",
    ],
)
def test_a_tampered_or_truncated_bundle_fails_clearly(
    corrupt_job: Path, tmp_path: Path, damage: str
) -> None:
    bundle = tmp_path / "bundle"
    shutil.copytree(rule_status(corrupt_job)["bundle"], bundle)
    if damage == "truncate_model":
        model = bundle / "state" / "model.safetensors"
        model.write_bytes(model.read_bytes()[:100])
        expected = "model.safetensors: missing, truncated or modified"
    elif damage == "flip_batch":
        raw = bytearray((bundle / "batch.safetensors").read_bytes())
        raw[-1] ^= 0xFF
        (bundle / "batch.safetensors").write_bytes(bytes(raw))
        expected = "batch.safetensors: checksum mismatch"
    elif damage == "drop_rng":
        (bundle / "rng.safetensors").unlink()
        expected = "rng.safetensors: missing"
    elif damage == "garble_manifest":
        (bundle / "bundle.json").write_text('{"format": "remedy-repro-bundle-v1", "st')
        expected = "bundle.json: unreadable"
    elif damage == "edit_manifest":  # bundle.json is covered by its own checksum
        meta = json.loads((bundle / "bundle.json").read_text())
        meta["hyperparameters"]["width"] = 10_000_000
        (bundle / "bundle.json").write_text(json.dumps(meta))
        expected = "bundle.json: checksum mismatch"
    else:
        meta = json.loads((bundle / "bundle.json").read_text())
        meta["sha256"].pop("state/model.safetensors")
        write_manifest(bundle, meta)  # resealed: the manifest itself must still be complete
        expected = "no checksum for state/model.safetensors"
    with pytest.raises(BundleError, match=expected):
        replay(bundle)
    cli = subprocess.run(
        [sys.executable, "-m", "remedy", "repro", str(bundle)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert cli.returncode == 2 and expected.split(":")[0] in cli.stderr


def test_remedy_repro_prints_the_localisation(corrupt_job: Path) -> None:
    status = rule_status(corrupt_job)
    cli = subprocess.run(
        [sys.executable, "-m", "remedy", "repro", status["bundle"], "--json"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    printed = json.loads(cli.stdout)
    assert printed["reproduced"] and printed["localisation"] == "forward stem"
    assert printed["suspect_samples"] == [BAD_SAMPLE]


def test_debug_stops_at_the_localised_module(
    corrupt_job: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    stops: list[str] = []
    monkeypatch.setattr("remedy.training.replay.pdb.set_trace", lambda: stops.append("pdb"))
    path = rule_status(corrupt_job)["bundle"]
    debug(path, replay(path))
    assert stops == ["pdb"]
    assert "before stem.forward" in capsys.readouterr().out


def test_the_rule_status_goes_where_the_backend_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("REMEDY_STOP_FILE", raising=False)
    monkeypatch.delenv("REMEDY_DEBUGGER_CONFIG", raising=False)
    monkeypatch.setenv(RULE_STATUS_DIR_ENV, str(tmp_path / "statuses"))
    out = tmp_path / "out"
    result = train(Hyperparameters.model_validate(UNSTABLE), out)
    assert result["status"] == "Stopped"
    status = strict_json((tmp_path / "statuses" / "NonFiniteGradient.json").read_text())
    assert status["RuleEvaluationStatus"] == "IssuesFound" and status["step"] == result["steps"]
    assert not (out / "rule_status").exists()


def with_hyperparameters(source: str, bundle: Path, changes: dict[str, Any]) -> Path:
    """A copy of a bundle whose manifest records other hyperparameters (resealed)."""
    shutil.copytree(source, bundle)
    meta = json.loads((bundle / "bundle.json").read_text())
    meta["hyperparameters"] |= changes
    write_manifest(bundle, meta)
    return bundle


def test_a_bundle_from_before_the_contract_split_replays(corrupt_job: Path, tmp_path: Path) -> None:
    # Jobs then also received two run_spec fields they never read.
    old = {"entry_point": "training.train", "debugger_save_interval": 100}
    bundle = with_hyperparameters(rule_status(corrupt_job)["bundle"], tmp_path / "old", old)
    assert replay(bundle).localisation == "forward stem"


def test_a_bundle_with_a_bad_hyperparameter_names_it(corrupt_job: Path, tmp_path: Path) -> None:
    source = rule_status(corrupt_job)["bundle"]
    bundle = with_hyperparameters(source, tmp_path / "bad", {"depth": 9})
    with pytest.raises(BundleError, match=r"bundle\.json: 1 invalid field\(s\)\n  depth: "):
        replay(bundle)


def test_hyperparameters_that_do_not_fit_the_state_are_refused_before_building(
    corrupt_job: Path, tmp_path: Path
) -> None:
    # Valid for the contract, but not the bundled model: checked on the meta device, so a
    # width of 1024 allocates nothing (the real model would need gigabytes).
    source = rule_status(corrupt_job)["bundle"]
    bundle = with_hyperparameters(source, tmp_path / "wide", {"width": 1024})
    with pytest.raises(BundleError, match="does not fit the bundled state"):
        replay(bundle)
