"""Zero-code capture of AMP loops in process: a GradScaler seen without the script's help."""

from __future__ import annotations

import io
import pickle

import pytest
import torch
from torch import nn

from remedy.debugger import Update, ZeroCodeCapture


class Recorder:
    def __init__(self) -> None:
        self.updates: list[Update] = []

    def on_update(self, update: Update) -> None:
        self.updates.append(update)

    def between_updates(self) -> None:
        pass


def model_and_data() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    x = torch.randn(64, 8)
    return model, x, x.sum(1, keepdim=True) * 3  # overflows float16 at a scale of 2**16


def test_close_restores_the_scaler_and_a_disabled_scaler_is_a_plain_loop() -> None:
    original = torch.amp.GradScaler.step
    model, x, y = model_and_data()
    recorder = Recorder()
    with ZeroCodeCapture(None, recorder):
        assert torch.amp.GradScaler.step is not original
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        scaler = torch.amp.GradScaler("cpu", enabled=False)  # GradScaler(enabled=use_amp)
        for _ in range(3):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        # the scaler's own state travels as before
        torch.save(scaler.state_dict(), io.BytesIO())
        pickle.loads(pickle.dumps(torch.amp.GradScaler("cpu")))
    assert torch.amp.GradScaler.step is original
    assert [u.step for u in recorder.updates] == [1, 2, 3]
    assert all(u.loss_scale is None and not u.scaler_skipped for u in recorder.updates)


def test_accumulated_scaled_losses_are_unscaled_and_each_skip_is_one_update() -> None:
    model, x, y = model_and_data()
    recorder = Recorder()
    micro: list[list[float]] = []
    scales: list[float] = []
    with ZeroCodeCapture(None, recorder):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        scaler = torch.amp.GradScaler("cpu")
        for _ in range(6):
            optimizer.zero_grad()
            micro.append([])
            for xb, yb in zip(x.split(32), y.split(32), strict=True):
                with torch.autocast("cpu", dtype=torch.float16):
                    loss = nn.functional.mse_loss(model(xb), yb) / 2
                scaler.scale(loss).backward()
                micro[-1].append(loss.item())
            scales.append(scaler.get_scale())
            scaler.step(optimizer)
            scaler.update()
    updates = recorder.updates
    assert [u.step for u in updates] == [1, 2, 3, 4, 5, 6]
    assert [u.micro_batches for u in updates] == [2] * 6
    assert [u.loss_scale for u in updates] == scales
    skipped = [a > b for a, b in zip(scales, [*scales[1:], scales[-1]], strict=True)]
    assert skipped[0] and [u.scaler_skipped for u in updates] == skipped
    for update, losses in zip(updates, micro, strict=True):
        assert update.loss == pytest.approx(sum(losses) / 2, rel=1e-6)
        assert update.finite is not update.scaler_skipped
