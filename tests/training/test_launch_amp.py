"""AMP under python -m remedy.training.launch: real, unmodified mixed-precision scripts on CPU.

float16 autocast with torch.amp.GradScaler("cpu") overflows for real in its first steps (the
scaler starts at 2**16 and halves its scale until the gradients fit): those steps are
recorded as steps the scaler skipped, with the loss scale, and the NaN guard lets the
scaler handle them, while a real divergence (the scale collapsing to 1, or a non-finite
loss) is still stopped. bfloat16 autocast needs no scaler: it is captured as fp32 is.
Each script writes what it saw itself (truth.json) for the test to compare with.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from remedy.debugger import create_trial
from tests.helpers.launched_script import Job, run, write

FLOAT16_SCRIPT = """\
    import argparse
    import json

    import torch
    from torch import nn

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float, required=True)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--fused", action="store_true")  # Adam(fused=True) skips by itself
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    if args.fused:
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, fused=True)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    scaler = torch.amp.GradScaler("cpu")
    x = torch.randn(64, 8)
    y = x.sum(1, keepdim=True) * 3
    truth = []
    for step in range(args.steps):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.float16):
            loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scale = scaler.get_scale()
        if args.fused:  # the gradients stay scaled: the optimizer unscales them itself
            unscaled = [p.grad.double() / scale for p in model.parameters()]
        else:  # torch's recipe for clipping: unscale first (clipping itself left out)
            scaler.unscale_(optimizer)
            unscaled = [p.grad.double() for p in model.parameters()]
            torch.save({n: p.grad.clone() for n, p in model.named_parameters()}, f"g{step}.pt")
        norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in unscaled])).item()
        scaler.step(optimizer)
        scaler.update()
        skipped = scaler.get_scale() < scale  # the scaler lowers its scale after a skip
        truth.append({"loss": loss.item(), "scale": scale, "skipped": skipped, "norm": norm})
    json.dump(truth, open("truth.json", "w"))
"""

BFLOAT16_SCRIPT = """\
    import json
    import sys

    import torch
    from torch import nn

    lr, steps = float(sys.argv[1]), int(sys.argv[2])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    x = torch.randn(64, 8) * 3
    y = x.sum(1, keepdim=True) * 3
    losses = []
    for step in range(steps):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    json.dump(losses, open("truth.json", "w"))
"""


@pytest.fixture
def job(tmp_path: Path) -> Job:
    return Job(tmp_path / "job")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


def truth(project: Path) -> list[Any]:
    return json.loads((project / "truth.json").read_text())


@pytest.mark.parametrize("fused", [False, True], ids=["unscale_-then-step", "fused-adam"])
def test_float16_overflows_the_scaler_skips_are_steps_not_a_divergence(
    job: Job, project: Path, fused: bool
) -> None:
    write(project, "amp.py", FLOAT16_SCRIPT)
    flags = ["--lr", "0.01", "--steps", "10"] + (["--fused"] if fused else [])
    done = run(project, job.env(gradients_every=1), "amp.py", *flags)
    assert done.returncode == 0, done.stderr
    seen = truth(project)
    skipped = [s["skipped"] for s in seen]
    assert skipped[0] and not skipped[-1]  # real overflows at the start, then it trains

    result = job.result()
    assert result["status"] == "Completed" and result["steps"] == 10  # skipped steps count
    assert not job.rule_status.exists()  # the guard left the overflows to the scaler
    metrics = job.metrics()
    assert [m.get("scaler_skipped", False) for m in metrics] == skipped
    assert [m["loss_scale"] for m in metrics] == [s["scale"] for s in seen]
    for record, step in zip(metrics, seen, strict=True):
        assert record["loss"] == pytest.approx(step["loss"], rel=1e-6)  # unscaled
        if not step["skipped"]:
            assert record["grad_norm"] == pytest.approx(step["norm"], rel=1e-6)  # unscaled
    assert metrics[-1]["loss"] < metrics[0]["loss"]

    trial = create_trial(job.store)
    assert trial.tensor("loss").steps() == list(range(10))
    assert trial.tensor("loss_scale").steps() == list(range(10))
    assert trial.tensor("scaler_skipped").steps() == [i for i, s in enumerate(skipped) if s]
    applied = [i for i, s in enumerate(skipped) if not s]
    assert trial.tensor("gradient/0.weight").steps() == applied  # none of the overflowed
    for i in range(10):
        assert float(trial.tensor("loss").value(i)) == pytest.approx(seen[i]["loss"], rel=1e-6)
        assert float(trial.tensor("loss_scale").value(i)) == seen[i]["scale"]
    if not fused:  # the gradients the optimizer applied, unscaled
        for i in applied:
            grads = torch.load(project / f"g{i}.pt", weights_only=True)
            for name, grad in grads.items():
                np.testing.assert_array_equal(trial.tensor(f"gradient/{name}").value(i), grad)


def test_a_real_divergence_under_the_scaler_is_stopped(job: Job, project: Path) -> None:
    write(project, "amp.py", FLOAT16_SCRIPT)
    done = run(project, job.env(), "amp.py", "--lr", "3.0", "--steps", "60")
    assert done.returncode == 0, done.stderr
    assert not (project / "truth.json").exists()  # stopped inside its loop
    result = job.result()
    assert result["status"] == "Stopped" and result["steps"] < 60
    status = json.loads((job.rule_status / "NonFiniteGradient.json").read_text())
    assert status["RuleEvaluationStatus"] == "IssuesFound"
    assert status["step"] == result["steps"]
    assert "loss scale" in status["StatusDetails"]
    assert json.loads(job.stop_file.read_text())["requested_by"] == "nan_guard"
    metrics = job.metrics()
    assert metrics[-1]["scaler_skipped"] and metrics[-1]["loss_scale"] <= 1.0
    assert metrics[0]["scaler_skipped"] and metrics[0]["loss_scale"] == 2.0**16


def test_bfloat16_autocast_is_captured_and_its_divergence_stopped(job: Job, project: Path) -> None:
    write(project, "bf16.py", BFLOAT16_SCRIPT)
    done = run(project, job.env(gradients_every=1), "bf16.py", "0.01", "8")
    assert done.returncode == 0, done.stderr
    assert job.result()["status"] == "Completed" and job.result()["steps"] == 8
    metrics = job.metrics()
    assert [m["loss"] for m in metrics] == pytest.approx(truth(project), rel=1e-6)
    assert metrics[-1]["loss"] < metrics[0]["loss"]
    assert not any("loss_scale" in m or "scaler_skipped" in m for m in metrics)  # no scaler
    trial = create_trial(job.store)
    assert trial.tensor("gradient/0.weight").steps() == list(range(8))
    assert "loss_scale" not in trial.tensor_names()
    assert not job.rule_status.exists()

    diverging = Job(job.root.parent / "diverging")
    done = run(project, diverging.env(), "bf16.py", "1.0", "60")
    assert done.returncode == 0, done.stderr
    assert diverging.result()["status"] == "Stopped" and diverging.result()["steps"] < 60
    status = json.loads((diverging.rule_status / "NonFiniteGradient.json").read_text())
    assert status["RuleEvaluationStatus"] == "IssuesFound"
