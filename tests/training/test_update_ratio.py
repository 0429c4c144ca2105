"""The job's update ratio (training/update_ratio.py) on real training: how far the updates
move the weights, in proportion to the rate, and the figure the policy reads from a
launch's step records (state_schema/update_ratio.py)."""

from __future__ import annotations

import statistics

import pytest
import torch
from torch import nn

from remedy.state_schema.gradient_agreement import AGREEMENT_EVERY
from remedy.state_schema.update_ratio import (
    HEALTHY_UPDATE_RATIO,
    UPDATE_RATIO_FIELD,
    launch_update_ratio,
)
from remedy.training.update_ratio import UpdateRatio

STEPS = 60


def classifier_records(
    lr: float, adam: bool = False, staged: bool = False, frozen: bool = False
) -> list[dict[str, float]]:
    """A small MLP on a noisy two-class problem, minibatches of 32: each update's figures
    (staged: by a device's path; frozen: with a layer that does not train)."""
    torch.manual_seed(0)
    x = torch.randn(1024, 20)
    y = (x[:, :3].sum(1) > 0).long()
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
    if frozen:  # layers in front that do not train (pretrained): most of the weights
        for _ in range(3):
            model.insert(0, nn.Linear(20, 20).requires_grad_(False))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=lr) if adam else torch.optim.SGD(params, lr, 0.9)
    ratio = UpdateRatio(staged=staged)
    records = []
    for step in range(1, STEPS + 1):
        batch = torch.randint(0, 1024, (32,))
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
        records.append(ratio.see(step, model.parameters))
        optimizer.step()
    return records


def figures(records: list[dict[str, float]]) -> list[float]:
    return [r[UPDATE_RATIO_FIELD] for r in records if r]


@pytest.mark.parametrize("adam", [False, True], ids=["sgd-momentum", "adam"])
def test_the_updates_move_the_weights_in_proportion_to_the_rate(adam: bool) -> None:
    slow, fast = classifier_records(1e-6, adam), classifier_records(1e-4, adam)
    # measured every AGREEMENT_EVERY updates, from the second such update on
    measured = [step for step, r in enumerate(slow, 1) if r]
    assert measured == list(range(2 * AGREEMENT_EVERY, STEPS + 1, AGREEMENT_EVERY))
    assert all(set(r) == {UPDATE_RATIO_FIELD} for r in slow if r)
    ratio = statistics.median(figures(fast)) / statistics.median(figures(slow))
    assert 70 < ratio < 130, ratio  # 100x the rate, about 100x the movement
    assert max(figures(slow)) < 1e-5  # far below a healthy run's
    # at a rate that trains it, above the size the policy calls healthy
    healthy = classifier_records(1e-2 if adam else 0.1, adam)
    assert statistics.median(figures(healthy)) > HEALTHY_UPDATE_RATIO


def test_a_frozen_layer_does_not_hide_the_trained_ones() -> None:
    """Weights that do not train are left out (they have no gradient), not counted as
    weights that did not move: 6 frozen of 10 would make the median 0."""
    with_frozen = figures(classifier_records(1e-3, frozen=True))
    assert min(with_frozen) > 0.1 * min(figures(classifier_records(1e-3)))


def test_a_devices_figures_go_through_a_host_buffer_and_come_out_the_same() -> None:
    plain, staged = classifier_records(1e-3), classifier_records(1e-3, staged=True)
    assert figures(staged) == pytest.approx(figures(plain))
    assert len(figures(staged)) >= len(figures(plain)) - 1  # the last may still be on its way


def test_a_launch_figure_is_the_median_at_the_rate_it_was_given() -> None:
    """Measured in a warmup at a tenth of the typed rate, a ratio counts ten times; a step
    at rate 0 says nothing; no measure at all is None, not 0."""
    ratios = [None, 1e-5, None, 4e-5, 3e-5, 0.0]
    rates = [0.01, 0.01, 0.1, 0.1, 0.1, 0.0]
    assert launch_update_ratio(ratios, rates, typed=0.1) == pytest.approx(4e-5)
    assert launch_update_ratio(ratios, [None] * 6, typed=0.1) == pytest.approx(2e-5)
    assert launch_update_ratio([None, None], [0.1, 0.1], typed=0.1) is None


def test_a_failure_to_measure_is_said_once_not_raised() -> None:
    """A weight the measure cannot read ends the measuring with one warning, never the
    training: no figure is recorded after it, and nothing more is measured."""

    class Broken:
        requires_grad = True

        @property
        def grad(self) -> torch.Tensor:
            raise RuntimeError("no gradient here")

    broken = UpdateRatio()
    with pytest.warns(RuntimeWarning, match="update ratio not measured from update 5 on") as said:
        for step in range(1, 21):
            assert broken.see(step, lambda: [Broken()]) == {}
    assert broken.off and len(said) == 1
