import json
from pathlib import Path

import pytest
import torch
from torch import nn

from remedy.models import ResNet, ResNetConfig, build_model
from remedy.training.checkpoint import (
    CheckpointError,
    load_checkpoint,
    save_checkpoint,
)


def trained_pair(lr: float = 0.1) -> tuple[ResNet, torch.optim.SGD]:
    torch.manual_seed(0)
    model = build_model(ResNetConfig(depth=8, width=2, batch_norm=True))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)
    for _ in range(2):  # gives momentum buffers and BN running statistics
        loss = nn.functional.cross_entropy(model(torch.rand(4, 3, 32, 32)), torch.arange(4))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model, optimizer


def fresh_pair(lr: float = 0.5) -> tuple[ResNet, torch.optim.SGD]:
    torch.manual_seed(1)
    model = build_model(ResNetConfig(depth=8, width=2, batch_norm=True))
    return model, torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)


def test_round_trip_restores_model_optimizer_and_counters(tmp_path: Path) -> None:
    model, optimizer = trained_pair()
    path = save_checkpoint(tmp_path, model, optimizer, epoch=3, step=42)
    assert path == tmp_path / "epoch-0003"
    assert sorted(p.name for p in path.iterdir()) == [
        "checkpoint.json", "model.safetensors", "optimizer.safetensors"
    ]  # fmt: skip

    restored, restored_optimizer = fresh_pair()
    info = load_checkpoint(path, restored, restored_optimizer)
    assert (info.epoch, info.step) == (3, 42)
    for (name, a), b in zip(
        model.state_dict().items(), restored.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name
    assert restored_optimizer.param_groups[0]["lr"] == 0.1
    assert restored_optimizer.param_groups[0]["weight_decay"] == 1e-4
    for p, q in zip(model.parameters(), restored.parameters(), strict=True):
        assert torch.equal(optimizer.state[p]["momentum_buffer"],
                           restored_optimizer.state[q]["momentum_buffer"])  # fmt: skip


def test_sidecar_names_tensors_readably(tmp_path: Path) -> None:
    model, optimizer = trained_pair()
    path = save_checkpoint(tmp_path, model, optimizer, epoch=1, step=2)
    meta = json.loads((path / "checkpoint.json").read_text())
    assert meta["epoch"] == 1 and meta["step"] == 2 and meta["optimizer"] == "SGD"
    assert meta["param_groups"][0]["momentum"] == 0.9
    assert "stacks.0.0.conv1.weight" in meta["param_groups"][0]["params"]


def test_a_truncated_file_is_an_error_naming_it(tmp_path: Path) -> None:
    model, optimizer = trained_pair()
    path = save_checkpoint(tmp_path, model, optimizer, epoch=1, step=2)
    data = (path / "model.safetensors").read_bytes()
    (path / "model.safetensors").write_bytes(data[: len(data) - 100])
    with pytest.raises(CheckpointError, match="model.safetensors.*truncated or modified"):
        load_checkpoint(path, *fresh_pair())


def test_a_tampered_optimizer_file_is_an_error(tmp_path: Path) -> None:
    model, optimizer = trained_pair()
    path = save_checkpoint(tmp_path, model, optimizer, epoch=1, step=2)
    data = bytearray((path / "optimizer.safetensors").read_bytes())
    data[-1] ^= 0xFF
    (path / "optimizer.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="optimizer.safetensors"):
        load_checkpoint(path, *fresh_pair())


def test_a_checkpoint_of_another_architecture_does_not_load(tmp_path: Path) -> None:
    model, optimizer = trained_pair()
    path = save_checkpoint(tmp_path, model, optimizer, epoch=1, step=2)
    other = build_model(ResNetConfig(depth=8, width=2, batch_norm=False))
    with pytest.raises(CheckpointError, match="does not fit"):
        load_checkpoint(path, other)


def test_missing_or_broken_sidecar(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="not a checkpoint"):
        load_checkpoint(tmp_path, *fresh_pair())
    model, optimizer = trained_pair()
    path = save_checkpoint(tmp_path, model, optimizer, epoch=1, step=2)
    (path / "checkpoint.json").write_text('{"format": "remedy-checkpoint-v1", "epo')
    with pytest.raises(CheckpointError, match="checkpoint.json"):
        load_checkpoint(path, *fresh_pair())


def test_no_temporary_folders_are_left(tmp_path: Path) -> None:
    model, optimizer = trained_pair()
    for epoch in (1, 2, 10):
        save_checkpoint(tmp_path, model, optimizer, epoch=epoch, step=epoch * 5)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["epoch-0001", "epoch-0002", "epoch-0010"]
