"""benchmarks/gradient_agreement.py's measure, on stores of real training: a regression far
from its minimum (a rate far too small) has consecutive gradients that agree; one that
reached its minimum has gradients that are mostly its batches' noise."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from remedy.debugger import Hook, HookConfig
from remedy.debugger.hook import LOSS_TENSOR_NAME
from tests.debugger.helpers import load_benchmark

STEPS = 150


def train_regression(out_dir: Path, lr: float) -> Path:
    """A linear regression on noisy targets, minibatches of 16, every update's loss and
    gradients saved; the store's folder."""
    torch.manual_seed(0)
    x = torch.randn(512, 8)
    y = x @ torch.randn(8, 1) + 0.5 * torch.randn(512, 1)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    every = {"save_interval": 1}
    config = {"out_dir": str(out_dir), "collections": {"losses": every, "gradients": every}}
    with Hook.from_config(HookConfig.from_dict(config)) as hook:
        for _ in range(STEPS):
            batch = torch.randint(0, 512, (16,))
            hook.begin_step()
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x[batch]), y[batch])
            loss.backward()
            hook.save_tensor(LOSS_TENSOR_NAME, loss, collection="losses")
            hook.save_parameters(model.named_parameters())
            hook.end_step()
            optimizer.step()
    return out_dir


def test_gradients_agree_far_from_the_minimum_and_not_near_it(tmp_path: Path) -> None:
    benchmark = load_benchmark("gradient_agreement")
    unmonitored = benchmark.as_monitored([])  # no step records: nothing sampled, not asked
    slow = benchmark.measure(train_regression(tmp_path / "slow", lr=1e-4), None, unmonitored)
    fit = benchmark.measure(train_regression(tmp_path / "fit", lr=0.05), None, unmonitored)
    assert slow.updates == fit.updates == STEPS
    assert slow.sampled == [] and not slow.asked
    slow_first, slow_last = slow.agreement[1]
    fit_first, fit_last = fit.agreement[1]
    # 1e-4: 150 updates barely move the weights, so the mean gradient outweighs the noise
    assert slow_first > 0.5 and slow_last > 0.5, slow.agreement
    # 0.05: at the minimum within a few dozen updates, its last third is batch noise
    assert abs(fit_last) < 0.3 and fit_first > fit_last, fit.agreement
    assert fit.last_third_share < 0.1  # its loss had stopped falling: the curve's measure
    assert -1 <= min(min(v) for v in fit.agreement.values())
    assert max(max(v) for v in slow.agreement.values()) <= 1
