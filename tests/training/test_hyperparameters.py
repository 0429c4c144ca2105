"""The job honours every hyperparameter the strategies change (tiny real runs, in-process)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

import remedy.training.build as build_module
from remedy.models import ResNetConfig, build_model
from remedy.state_schema import Hyperparameters
from remedy.training.checkpoint import CheckpointError
from remedy.training.train import train

TINY: dict[str, Any] = {
    "depth": 8, "width": 2, "batch_size": 16, "train_samples": 32, "test_samples": 16,
    "num_epochs": 1, "warmup_learning_rate": 0.001, "learning_rate": 0.001,
    "checkpoint_every_epochs": 1,
}  # fmt: skip


@pytest.fixture(autouse=True)
def no_debugger(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REMEDY_DEBUGGER_CONFIG", raising=False)
    monkeypatch.delenv("REMEDY_STOP_FILE", raising=False)


def run(out: Path, **fields: Any) -> dict[str, Any]:
    return train(Hyperparameters.model_validate(TINY | fields), out)


def steps(out: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    return [m for m in lines if m["type"] == "step"]


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    return load_file(checkpoint / "model.safetensors")


def meta(checkpoint: Path) -> dict[str, Any]:
    return json.loads((checkpoint / "checkpoint.json").read_text())


@pytest.mark.parametrize(
    ("name", "kind", "momentum"),
    [
        ("sgd", "SGD", 0.0),
        ("momentum", "SGD", 0.9),
        ("adam", "Adam", None),
        ("adamw", "AdamW", None),
    ],
)
def test_optimizer(tmp_path: Path, name: str, kind: str, momentum: float | None) -> None:
    assert run(tmp_path, optimizer=name)["status"] == "Completed"
    saved = meta(tmp_path / "checkpoints" / "epoch-0001")
    assert saved["optimizer"] == kind
    if momentum is not None:
        assert saved["param_groups"][0]["momentum"] == momentum


@pytest.mark.parametrize("init", ["he_normal", "lecun_normal", "xavier_uniform", "orthogonal"])
def test_init(tmp_path: Path, init: str) -> None:
    # With a learning rate of 1e-30 the checkpoint holds the initial weights: they must be
    # exactly those of a model built with this init from the same seed.
    run(tmp_path, init=init, learning_rate=1e-30, warmup_learning_rate=1e-30, weight_decay=0.0)
    torch.manual_seed(0)
    expected = build_model(ResNetConfig(depth=8, width=2, init=init)).state_dict()
    saved = weights(tmp_path / "checkpoints" / "epoch-0001")
    assert all(torch.allclose(saved[k], v, atol=1e-6) for k, v in expected.items())


def test_init_differs_between_choices() -> None:
    stds = {}
    for init in ("he_normal", "lecun_normal"):
        torch.manual_seed(0)
        model = build_model(ResNetConfig(depth=8, width=8, init=init))
        stds[init] = model.stem.weight.detach().std().item()
    assert stds["he_normal"] / stds["lecun_normal"] == pytest.approx(2**0.5, rel=0.1)


def test_grad_clip_norm_bounds_the_update(tmp_path: Path) -> None:
    # One plain-SGD step at lr 1 without weight decay moves the weights by the gradient.
    one_step = {"train_samples": 16, "optimizer": "sgd", "weight_decay": 0.0,
                "learning_rate": 1.0, "warmup_learning_rate": 1.0}  # fmt: skip
    moved = {}
    for clip in (None, 1e-3):
        out = tmp_path / str(clip)
        run(out, grad_clip_norm=clip, **one_step)
        torch.manual_seed(0)
        start = build_model(ResNetConfig(depth=8, width=2)).state_dict()
        end = weights(out / "checkpoints" / "epoch-0001")
        diff = [
            (end[k] - start[k]).flatten()
            for k, _ in build_model(ResNetConfig(depth=8, width=2)).named_parameters()
        ]
        moved[clip] = torch.linalg.vector_norm(torch.cat(diff)).item()
        assert steps(out)[0]["grad_norm"] > 1e-3  # the unclipped norm is what is logged
    assert moved[1e-3] == pytest.approx(1e-3, rel=1e-3)
    assert moved[None] > 10 * moved[1e-3]


def test_dropout_is_built_into_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[ResNetConfig] = []

    def spy(config: ResNetConfig) -> torch.nn.Module:
        built.append(config)
        return build_model(config)

    monkeypatch.setattr(build_module, "build_model", spy)
    assert run(tmp_path, dropout=0.3)["status"] == "Completed"
    assert built[0].dropout == 0.3
    model = build_model(built[0])
    assert isinstance(model.dropout, torch.nn.Dropout) and model.dropout.p == 0.3
    assert build_model(ResNetConfig(depth=8, width=2)).dropout is None


def test_warmup_epochs(tmp_path: Path) -> None:
    run(tmp_path, num_epochs=3, warmup_learning_rate=0.002, warmup_epochs=2)
    by_epoch = {m["epoch"]: m["learning_rate"] for m in steps(tmp_path)}
    assert by_epoch == {0: 0.002, 1: 0.002, 2: 0.001}


def test_warm_start_continues_from_the_checkpoint(tmp_path: Path) -> None:
    first = tmp_path / "first"
    run(first, num_epochs=2, learning_rate=0.01)
    checkpoint = first / "checkpoints" / "epoch-0001"
    second = tmp_path / "second"
    tiny_lr = {"learning_rate": 1e-30, "warmup_learning_rate": 1e-30, "weight_decay": 0.0}
    result = run(second, num_epochs=2, init_checkpoint=str(checkpoint), start_epoch=1, **tiny_lr)
    # Only epoch 1 ran, its steps continue from the checkpoint's, and (learning rate ~0) the
    # weights it ends with are the checkpoint's, not a fresh model's.
    assert result["status"] == "Completed" and result["epochs_completed"] == 2
    ran = steps(second)
    assert {m["epoch"] for m in ran} == {1}
    assert ran[0]["step"] == meta(checkpoint)["step"] + 1
    assert result["steps"] == meta(first / "checkpoints" / "epoch-0002")["step"]
    loaded, ended = weights(checkpoint), weights(second / "checkpoints" / "epoch-0002")
    assert all(torch.allclose(loaded[k], ended[k], atol=1e-6) for k in loaded)


def test_warm_start_with_another_optimizer_loads_only_the_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run(tmp_path / "first", optimizer="momentum")
    checkpoint = tmp_path / "first" / "checkpoints" / "epoch-0001"
    run(tmp_path / "second", num_epochs=2, init_checkpoint=str(checkpoint), optimizer="adam")
    assert "optimizer state fresh" in capsys.readouterr().out


def test_a_missing_checkpoint_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError):
        run(tmp_path, init_checkpoint=str(tmp_path / "nope"))


def test_step_checkpoints_are_kept_few_and_resume_mid_epoch_exactly(tmp_path: Path) -> None:
    full = tmp_path / "full"
    every_two = {"num_epochs": 3, "learning_rate": 0.05, "train_samples": 48}  # 3 steps/epoch
    run(full, **every_two, checkpoint_every_steps=2, keep_checkpoints=2)
    kept = sorted(p.name for p in (full / "checkpoints").iterdir())
    assert kept == ["epoch-0001", "epoch-0002", "epoch-0003", "step-000000006", "step-000000008"]
    middle = full / "checkpoints" / "step-000000008"  # epoch 2, after its 2nd of 3 batches
    assert (meta(middle)["epoch"], meta(middle)["step"]) == (2, 8)

    resumed = tmp_path / "resumed"
    result = run(resumed, **every_two, init_checkpoint=str(middle))
    ran = steps(resumed)
    assert [(m["epoch"], m["step"]) for m in ran] == [(2, 9)]  # the one batch left
    assert result["steps"] == 9
    # The same batch in the same order from the same state: the very weights of the full run.
    expected, got = (
        weights(full / "checkpoints" / "epoch-0003"),
        weights(resumed / "checkpoints" / "epoch-0003"),
    )
    assert all(torch.equal(expected[k], got[k]) for k in expected)


def test_skip_steps_pass_over_their_batches_and_keep_the_data_order(tmp_path: Path) -> None:
    plain = {"num_epochs": 2, "train_samples": 48}  # 3 steps per epoch
    result = run(tmp_path, **plain, skip_steps=[{"first": 2, "last": 3}])
    assert [m["step"] for m in steps(tmp_path)] == [1, 4, 5, 6]
    assert (result["steps"], result["skipped_steps"]) == (6, 2)
