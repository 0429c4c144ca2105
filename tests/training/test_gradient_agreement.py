"""The job's gradient agreement (training/gradient_agreement.py) on real training: a
regression at a rate far too small ends with gradients that agree, one that reached its
minimum with gradients that are mostly its batches' noise; the verdict's bar lies between."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from remedy.records.verdict import AGREEING
from remedy.state_schema.gradient_agreement import (
    AGREEMENT_EVERY,
    AGREEMENT_FIELDS,
    last_third_agreement,
)
from remedy.training.gradient_agreement import GradientAgreement, sampled

STEPS = 150


def regression_records(lr: float, staged: bool = False) -> list[dict[str, float]]:
    """A linear regression on noisy targets, minibatches of 16: each update's figures, as
    the job adds them to its step records (staged: by a device's path)."""
    torch.manual_seed(0)
    x = torch.randn(512, 8)
    y = x @ torch.randn(8, 1) + 0.5 * torch.randn(512, 1)
    model = nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    agreement = GradientAgreement(staged=staged)
    records = []
    for step in range(1, STEPS + 1):
        batch = torch.randint(0, 512, (16,))
        optimizer.zero_grad()  # set_to_none: every update's gradients are new tensors
        nn.functional.mse_loss(model(x[batch]), y[batch]).backward()
        records.append(agreement.see(step, model.parameters))
        optimizer.step()
    return records


def last_third(records: list[dict[str, float]]) -> list[float]:
    return last_third_agreement([[r.get(f) for r in records] for f in AGREEMENT_FIELDS.values()])


def test_far_from_the_minimum_gradients_agree_and_near_it_they_do_not() -> None:
    slow, fit = regression_records(1e-4), regression_records(0.05)
    # measured at the sampled updates and the ones 1 and 5 after them, nowhere else
    measured = [step for step, r in enumerate(slow, 1) if r]
    assert measured[:3] == [AGREEMENT_EVERY + 1, 2 * AGREEMENT_EVERY, 2 * AGREEMENT_EVERY + 1]
    assert set(slow[AGREEMENT_EVERY]) == {AGREEMENT_FIELDS[1]}
    assert set(slow[2 * AGREEMENT_EVERY - 1]) == {AGREEMENT_FIELDS[5]}
    lag_1, lag_5 = last_third(slow)
    assert min(lag_1, lag_5) >= AGREEING + 0.3, (lag_1, lag_5)  # the mean gradient leads
    fit_1, fit_5 = last_third(fit)
    assert max(fit_1, fit_5) < AGREEING, (fit_1, fit_5)  # the noise leads


def test_a_devices_figures_go_through_a_host_buffer_and_come_out_the_same() -> None:
    """On a GPU each figure is copied to a pinned host buffer and read once the copy is
    complete (debugger/host_copy.py); the same path on the CPU (staged) records the same
    figures at the same updates."""
    plain, staged = regression_records(1e-4), regression_records(1e-4, staged=True)
    assert staged == plain and sum(map(len, plain)) > 40


def test_a_large_model_is_sampled_and_its_cosine_kept() -> None:
    """Above the cap every k-th value of each tensor stands for the whole: on two real
    gradients of a small network, the sampled cosine is the full one's, near enough."""
    torch.manual_seed(1)
    model = nn.Sequential(nn.Linear(64, 128), nn.Tanh(), nn.Linear(128, 10))
    x, y = torch.randn(256, 64), torch.randint(0, 10, (256,))
    grads = []
    for inputs, labels in ((x[:16], y[:16]), (x[16:32], y[16:32])):
        model.zero_grad()
        nn.functional.cross_entropy(model(inputs), labels).backward()
        grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])

    def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
        return float(nn.functional.cosine_similarity(a, b, dim=0))

    full = cosine(sampled(grads[0]), sampled(grads[1]))
    total = sum(g.numel() for g in grads[0])
    small = [sampled(g, max_elements=total // 8) for g in grads]
    assert all(len(s) <= total // 8 + len(grads[0]) for s in small)  # one more per tensor
    assert abs(cosine(*small) - full) < 0.1, (cosine(*small), full)


def test_gradients_of_other_parameters_are_not_compared() -> None:
    """Two optimizers taking turns (a GAN's): an update of the other one's parameters
    is no successor of the kept one's, whatever their sizes."""
    first, second = nn.Linear(4, 4), nn.Linear(4, 4)
    agreement = GradientAgreement(every=2)
    figures = []
    for step in range(1, 13):
        model = first if step % 2 == 0 else second  # kept at even steps, lag 1 is odd
        model.zero_grad()
        model(torch.randn(8, 4)).square().mean().backward()
        figures.append(agreement.see(step, model.parameters))
    assert not any(AGREEMENT_FIELDS[1] in f for f in figures)


def test_sparse_gradients_are_left_out_and_a_failure_is_said_not_raised() -> None:
    """An nn.Embedding(sparse=True) has a sparse gradient: the dense ones are compared. A
    gradient the measure cannot gather ends the measuring with a warning, never the
    training."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(50, 8, sparse=True), nn.Flatten(), nn.Linear(16, 1))
    agreement = GradientAgreement()
    figures = {}
    for step in range(1, 12):
        model.zero_grad()
        model(torch.randint(0, 50, (4, 2))).square().mean().backward()
        figures |= agreement.see(step, model.parameters)
    assert set(figures) == set(AGREEMENT_FIELDS.values())

    class Broken:
        @property
        def grad(self) -> torch.Tensor:
            raise RuntimeError("no gradient here")

    broken = GradientAgreement()
    with pytest.warns(RuntimeWarning, match="gradient agreement not measured from update 5"):
        for step in range(1, 11):
            assert broken.see(step, lambda: [Broken()]) == {}
    assert broken.off
