"""python -m remedy.training.launch: real scripts in different styles, run unmodified.

Every test writes a small script (a tiny model, so it runs in seconds), starts the launcher
as a subprocess with the job contract's environment, and reads what the monitor reads:
progress.json, metrics.jsonl, result.json, the rule status folder and the tensor store.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from remedy.debugger import RuleStatus, create_trial
from remedy.debugger.evaluator import RuleEvaluator
from remedy.debugger.rule_config import RuleConfig
from tests.helpers.launched_script import Job, run, start, wait_for_step, write


@pytest.fixture
def job(tmp_path: Path) -> Job:
    return Job(tmp_path / "job")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


# -- the scripts ------------------------------------------------------------------------

NETS = """\
    import torch
    from torch import nn


    class Body(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.layers(x)
"""

ARGPARSE_SCRIPT = """\
    \"\"\"A classic script: argparse with its own flag names, a model class of its own.\"\"\"
    import argparse
    import copy
    import pickle
    import sys

    import torch
    from nets import Body  # a module in the script's own folder
    from torch import nn


    class Net(nn.Module):  # defined in __main__: torch.save(model) must still pickle it
        def __init__(self) -> None:
            super().__init__()
            self.body = Body()

        def forward(self, x):
            return self.body(x)


    def main() -> int:
        parser = argparse.ArgumentParser()
        parser.add_argument("--learning-rate", type=float, required=True)
        parser.add_argument("--iters", type=int, default=10)
        parser.add_argument("--clip", type=float)
        args = parser.parse_args()
        print("threads", torch.get_num_threads(), "name", __name__, "argv", sys.argv[1:])
        torch.manual_seed(0)
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate, momentum=0.9)
        x = torch.randn(64, 4)
        y = (x @ torch.tensor([1.0, -2.0, 3.0, 0.5])).unsqueeze(1)
        for _ in range(args.iters):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            if args.clip:
                nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            optimizer.step()
        torch.save(model, "model.pt")
        copy.deepcopy(model)
        pickle.loads(pickle.dumps(model))
        reloaded = torch.load("model.pt", weights_only=False)
        assert torch.equal(reloaded.body.layers[0].weight, model.body.layers[0].weight)
        print("saved", type(reloaded).__name__)
        return 0


    if __name__ == "__main__":
        sys.exit(main())
"""

MANUAL_SGD_SCRIPT = """\
    # In the style of the classic word-language-model example: no torch.optim at all.
    import sys

    import torch
    from torch import nn

    lr = float(sys.argv[sys.argv.index("--lr") + 1])
    steps = int(sys.argv[sys.argv.index("--steps") + 1])
    torch.manual_seed(0)
    vocab, context = 12, 3
    model = nn.Sequential(nn.Embedding(vocab, 8), nn.Flatten(), nn.Linear(8 * context, vocab))
    tokens = torch.randint(0, vocab, (48, context + 1))
    for step in range(steps):
        model.zero_grad()
        output = model(tokens[:, :context])
        loss = nn.functional.cross_entropy(output, tokens[:, context])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
    with open("model.pt", "wb") as f:
        torch.save(model, f)
    print("final loss", loss.item())
"""

ACCUMULATION_SCRIPT = """\
    import json

    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 6), nn.ReLU(), nn.Linear(6, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    x = torch.randn(32, 3)
    y = x.sum(1, keepdim=True)
    accumulate, micro_losses = 4, []
    for update in range(5):
        optimizer.zero_grad()
        micro_losses.append([])
        for xb, yb in zip(x.split(8), y.split(8)):
            loss = nn.functional.mse_loss(model(xb), yb) / accumulate
            loss.backward()
            micro_losses[-1].append(loss.item())
        # what the update uses: the gradients accumulated over the 4 micro-batches
        grads = {n: p.grad.clone() for n, p in model.named_parameters()}
        torch.save(grads, f"grads-{update}.pt")
        optimizer.step()
    json.dump(micro_losses, open("micro_losses.json", "w"))
"""

DIVERGING_SCRIPT = """\
    import argparse

    import torch
    from torch import nn

    parser = argparse.ArgumentParser()
    parser.add_argument("--lr", type=float)
    parser.add_argument("--epochs", type=int, default=300)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    x = torch.randn(64, 8) * 3
    y = x.sum(1, keepdim=True) * 3
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    for epoch in range(args.epochs):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    print("ran every epoch", loss.item())
"""

ENDLESS_SCRIPT = """\
    import sys
    import time
    from pathlib import Path

    import torch
    from torch import nn

    Path("started").write_text("")
    if "--load-slowly" in sys.argv:
        time.sleep(120)  # "loading data": no update for a long time
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 4), torch.randn(32, 1)
    swallowed = 0
    for step in range(1_000_000):
        try:
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            time.sleep(0.01)
        except Exception:  # a broad except in the script must not swallow the stop
            swallowed += 1
    print("the loop ended by itself")
"""


# -- the tests --------------------------------------------------------------------------


def test_an_argparse_script_with_torch_optim_runs_unchanged(job: Job, project: Path) -> None:
    write(project, "nets.py", NETS)
    write(project, "train.py", ARGPARSE_SCRIPT)
    done = run(project, job.env(), "train.py", "--learning-rate", "0.02", "--iters", "12")
    assert done.returncode == 0, done.stderr
    argv = "['--learning-rate', '0.02', '--iters', '12']"
    assert f"threads 1 name __main__ argv {argv}" in done.stdout
    assert "saved Net" in done.stdout  # torch.save(model), deepcopy and pickle all worked

    result = job.result()
    assert result["status"] == "Completed" and result["steps"] == 12
    progress = job.progress()
    assert progress["step"] == 12 and progress["start_step"] == 0
    assert progress["learning_rate"] == 0.02
    assert not {"epoch", "total_steps"} & progress.keys()  # unknown: omitted
    metrics = job.metrics()
    assert [m["step"] for m in metrics] == list(range(1, 13))
    assert all(m["type"] == "step" and m["grad_norm"] > 0 for m in metrics)
    assert progress["first_loss"] == metrics[0]["loss"]
    assert result["final_train_loss"] == metrics[-1]["loss"] < 0.5 * progress["first_loss"]

    trial = create_trial(job.store)
    assert trial.has_ended
    assert trial.tensor("loss").steps() == list(range(12))  # losses: every step
    names = [f"gradient/body.layers.{i}.{k}" for i in (0, 2) for k in ("bias", "weight")]
    assert sorted(trial.tensor_names(collection="gradients")) == names
    assert trial.tensor("gradient/body.layers.0.weight").steps() == [0, 5, 10]  # every 5
    for m in metrics:  # store step = progress step - 1
        assert float(trial.tensor("loss").value(m["step"] - 1)) == pytest.approx(m["loss"])


def test_a_manual_sgd_script_without_torch_optim(job: Job, project: Path) -> None:
    write(project, "lm.py", MANUAL_SGD_SCRIPT)
    done = run(project, job.env(gradients_every=2), "lm.py", "--lr", "2.0", "--steps", "9")
    assert done.returncode == 0, done.stderr
    assert job.result() == {
        "status": "Completed",
        "steps": 9,
        "final_train_loss": job.metrics()[-1]["loss"],
    }
    metrics = job.metrics()
    assert len(metrics) == 9 and "learning_rate" not in metrics[0]  # no optimizer to ask
    assert metrics[-1]["loss"] < metrics[0]["loss"] == job.progress()["first_loss"]
    trial = create_trial(job.store)
    assert trial.tensor("loss").steps() == list(range(9))
    assert sorted(trial.tensor_names(collection="gradients")) == [
        "gradient/0.weight", "gradient/2.bias", "gradient/2.weight",
    ]  # fmt: skip
    assert trial.tensor("gradient/2.weight").steps() == [0, 2, 4, 6, 8]
    assert (project / "model.pt").stat().st_size > 0


def test_a_bound_on_updates_stops_the_script_itself(job: Job, project: Path) -> None:
    """REMEDY_MAX_UPDATES (a probe's run_spec.max_updates): the script ends cleanly after
    that many updates, Stopped, with no one watching it; a bad value is refused up front."""
    write(project, "lm.py", MANUAL_SGD_SCRIPT)
    env = job.env(gradients_every=2, REMEDY_MAX_UPDATES="4")
    done = run(project, env, "lm.py", "--lr", "2.0", "--steps", "9")
    assert done.returncode == 0, done.stderr
    assert job.result()["status"] == "Stopped" and job.result()["steps"] == 4
    assert len(job.metrics()) == 4
    bad = run(project, job.env(REMEDY_MAX_UPDATES="0"), "lm.py", "--steps", "9")
    assert bad.returncode == 2 and "REMEDY_MAX_UPDATES='0': expected a positive integer" in (
        bad.stderr
    )


@pytest.mark.parametrize("told", ["continue", "stop"])
def test_a_bound_holds_where_the_job_can_be_continued(job: Job, project: Path, told: str) -> None:
    """With REMEDY_CONTINUE_FILE (a backend that can continue a job) the bound holds the
    script between updates instead: the continue file lets it train on to its own end,
    every update kept (a probe kept as the run); the stop file ends it there, Stopped."""
    write(project, "lm.py", MANUAL_SGD_SCRIPT)
    go_on = job.out / "continue_request"
    env = job.env(REMEDY_MAX_UPDATES="4", REMEDY_CONTINUE_FILE=str(go_on))
    process = start(project, env, "lm.py", "--lr", "2.0", "--steps", "9")
    try:
        wait_for_step(job, process, 4)
        time.sleep(1.0)  # held: no update past the bound, the process waiting
        assert process.poll() is None and len(job.metrics()) == 4
        (go_on if told == "continue" else job.stop_file).touch()
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert "held at its bound (4 updates)" in stderr
    status, steps = ("Completed", 9) if told == "continue" else ("Stopped", 4)
    assert (job.result()["status"], job.result()["steps"]) == (status, steps)
    assert [m["step"] for m in job.metrics()] == list(range(1, steps + 1))


EPOCHS_SCRIPT = """\
import argparse
import torch
from torch.utils.data import DataLoader, TensorDataset

p = argparse.ArgumentParser()
p.add_argument("--epochs", type=int, default=4)
p.add_argument("--batch", type=int, default=8)
a = p.parse_args()
torch.manual_seed(0)
x = torch.randn(240, 4)
data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=a.batch, shuffle=True)
net = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(net.parameters(), lr=0.01)
for epoch in range(a.epochs):
    for xb, yb in data:  # 30 batches, 30 updates an epoch
        loss = torch.nn.functional.mse_loss(net(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def held_at(job: Job, process: subprocess.Popen[str], updates: int) -> dict[str, Any]:
    """The job reaches update `updates` and stays there a second, its process waiting (a
    hold): its progress.json then."""
    wait_for_step(job, process, updates)
    time.sleep(1.0)
    assert process.poll() is None and len(job.metrics()) == updates
    return job.progress()


def test_a_length_counted_in_epochs_holds_to_be_asked_once_the_job_measured_one(
    job: Job, project: Path
) -> None:
    """REMEDY_HOLD_BY_EPOCHS=8 and a DataLoader of 30 batches: the first epoch's end
    measures 30 updates, so the job holds at 60, a quarter of 8 x 30 (an eighth, 30, is
    that epoch's end and too short to be asked), and says so in progress.json (hold_at)
    for the flow; continued to 120 (the flow's next point, half), it holds there, and
    continued with no bound it trains on to its end, hold_at gone. Four epochs: a quarter
    (30) is too short to be asked, it holds at half (60). Two epochs' half (30) is too
    short: not held. Batches of 5 (48 updates an epoch): an eighth of 8 epochs is the
    first epoch's end, long enough to be asked, and it holds there at once."""
    write(project, "epochs.py", EPOCHS_SCRIPT)
    go_on = job.out / "continue_request"
    env = job.env(REMEDY_HOLD_BY_EPOCHS="8", REMEDY_CONTINUE_FILE=str(go_on))
    process = start(project, env, "epochs.py", "--epochs", "8")
    try:
        progress = held_at(job, process, 60)  # no update past a quarter
        assert (progress["hold_at"], progress["steps_per_epoch"]) == (60, 30)
        go_on.write_text(json.dumps({"max_updates": 120}))
        held_at(job, process, 120)  # held again, at half
        go_on.touch()
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert "holds at 60 updates, a quarter of 8 epochs x 30" in stderr
    assert (job.result()["status"], job.result()["steps"]) == ("Completed", 240)
    assert "hold_at" not in job.progress()

    go_on.touch()  # already there: held at its bound, it goes on at once

    def epochs_run(epochs: int, **env: str) -> str:
        """The script over `epochs` epochs, told to hold by them: its launcher's stderr."""
        told = job.env(REMEDY_HOLD_BY_EPOCHS=str(epochs), REMEDY_CONTINUE_FILE=str(go_on), **env)
        done = run(project, told, "epochs.py", "--epochs", str(epochs))
        assert done.returncode == 0, done.stderr
        return done.stderr

    assert "holds at 60 updates, half of 4 epochs x 30" in epochs_run(4)
    assert "epoch_unmeasured" not in job.progress()  # its epoch came from a DataLoader
    assert job.result()["steps"] == 120
    said = epochs_run(2)
    assert "not held in 60 updates (2 epochs): half is past or too short" in said
    assert job.result()["steps"] == 60 and "hold_at" not in job.progress()
    # a bound of its own comes first (a probe's): it holds there, the continue file
    # already there lets it on at once
    said = epochs_run(4, REMEDY_MAX_UPDATES="50")
    assert "not held by its epochs: bounded at 50 updates already" in said
    assert job.result()["steps"] == 120 and "hold_at" not in job.progress()
    # batches of 5: 48 updates an epoch, so an eighth of 8 epochs (48) is the first
    # epoch's end, long enough to be asked: held there at once
    go_on.unlink()
    (job.out / "progress.json").unlink()  # the earlier run's: waited on below
    told = job.env(REMEDY_HOLD_BY_EPOCHS="8", REMEDY_CONTINUE_FILE=str(go_on))
    process = start(project, told, "epochs.py", "--epochs", "8", "--batch", "5")
    try:
        progress = held_at(job, process, 48)  # at the first epoch's end
        assert (progress["hold_at"], progress["steps_per_epoch"]) == (48, 48)
        go_on.touch()
        _, stderr = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert "holds at 48 updates, an eighth of 8 epochs x 48, to be asked" in stderr
    assert "held at its bound (48 updates)" in stderr
    assert job.result()["steps"] == 384


def test_a_script_batching_by_hand_says_it_cannot_measure_the_epochs_it_holds_by(
    job: Job, project: Path
) -> None:
    """Told to hold by its epochs, a script whose first update came from no DataLoader
    batch (it indexes its tensors itself) will never measure an epoch: its launcher says
    so in progress.json (epoch_unmeasured, where the flow warns of it) and in its log,
    and the script trains to its end unheld."""
    write(project, "regress.py", DIVERGING_SCRIPT)
    go_on = job.out / "continue_request"
    told = job.env(REMEDY_HOLD_BY_EPOCHS="40", REMEDY_CONTINUE_FILE=str(go_on))
    done = run(project, told, "regress.py", "--lr", "0.001", "--epochs", "40")
    assert done.returncode == 0, done.stderr
    assert "not held by its epochs: its first update came from no DataLoader batch" in done.stderr
    progress = job.progress()
    assert progress["epoch_unmeasured"] == 1 and "hold_at" not in progress
    assert (job.result()["status"], job.result()["steps"]) == ("Completed", 40)


CONFIG_SCRIPT = """
    import argparse

    import torch
    import yaml

    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--seed", type=int, default=0)
    cfg = yaml.safe_load(open(parser.parse_args().config))
    print("lr", cfg["optim"]["lr"], "steps", cfg["steps"], "layers", cfg["layers"])
    torch.manual_seed(0)
    w = torch.zeros(3, requires_grad=True)
    optimizer = torch.optim.SGD([w], lr=cfg["optim"]["lr"])
    for _ in range(cfg["steps"]):
        optimizer.zero_grad()
        loss = ((w - 1) ** 2).sum()
        loss.backward()
        optimizer.step()
"""


def test_a_script_reading_a_config_file_gets_the_attempts_copy(job: Job, project: Path) -> None:
    """REMEDY_CONFIG_EDITS (run_spec's FILE:key hyperparameters): the launcher writes a copy
    of the file with the attempt's values into the job's folder, the script reads it where
    its command line named the file, and the user's file is left as it was."""
    write(project, "fit.py", CONFIG_SCRIPT)
    original = "# the user's own\noptim: {lr: 0.1, momentum: 0}\nsteps: 3\nlayers: [8, 8]\n"
    write(project, "configs/fit.yaml", original)
    edits = {"configs/fit.yaml": {"optim.lr": 0.05, "steps": 5, "layers.1": 16}}
    env = job.env(REMEDY_CONFIG_EDITS=json.dumps(edits))
    done = run(project, env, "fit.py", "--config=./configs/fit.yaml", "--seed", "1")
    assert done.returncode == 0, done.stderr
    assert "lr 0.05 steps 5 layers [8, 16]" in done.stdout
    copy = job.out / "config" / "fit.yaml"
    assert f"configs/fit.yaml: optim.lr 0.05 (the file's 0.1), steps 5 (the file's 3), " \
        f"layers.1 16 (the file's 8) (this attempt's copy: {copy})" in done.stderr  # fmt: skip
    assert job.result()["steps"] == 5
    assert (project / "configs" / "fit.yaml").read_text() == original
    assert "momentum: 0" in copy.read_text()  # every other setting kept
    # a key the file lacks is refused before the script starts: a typo would change nothing
    env = job.env(REMEDY_CONFIG_EDITS=json.dumps({"configs/fit.yaml": {"optim.lrr": 1}}))
    bad = run(project, env, "fit.py", "--config", "configs/fit.yaml")
    assert bad.returncode == 2 and "lr " not in bad.stdout
    assert "configs/fit.yaml:optim.lrr: no key 'lrr' at optim (keys there: lr, momentum)" in (
        bad.stderr
    )


def test_gradient_accumulation_saves_the_update_once(job: Job, project: Path) -> None:
    write(project, "accumulate.py", ACCUMULATION_SCRIPT)
    done = run(project, job.env(gradients_every=1), "accumulate.py")
    assert done.returncode == 0, done.stderr
    assert job.result()["steps"] == 5  # 20 backward() calls, 5 updates
    micro_losses = json.loads((project / "micro_losses.json").read_text())
    metrics = job.metrics()
    for record, losses in zip(metrics, micro_losses, strict=True):
        assert record["loss"] == pytest.approx(np.mean(losses), rel=1e-6)
    trial = create_trial(job.store)
    assert trial.steps() == [0, 1, 2, 3, 4]
    for update in range(5):
        grads = torch.load(project / f"grads-{update}.pt", weights_only=True)
        for name, grad in grads.items():
            saved = trial.tensor(f"gradient/{name}").value(update)
            np.testing.assert_array_equal(saved, grad.numpy())


def test_a_diverging_learning_rate_is_stopped_by_the_nan_guard(job: Job, project: Path) -> None:
    write(project, "regress.py", DIVERGING_SCRIPT)
    done = run(project, job.env(gradients_every=1), "regress.py", "--lr", "1.0")
    assert done.returncode == 0, done.stderr
    assert "ran every epoch" not in done.stdout
    result = job.result()
    assert result["status"] == "Stopped" and 1 < result["steps"] < 300
    assert result["final_train_loss"] is None  # the non-finite loss, as null
    status = json.loads((job.rule_status / "NonFiniteGradient.json").read_text())
    assert status["RuleConfigurationName"] == "NonFiniteGradient"
    assert status["RuleEvaluationStatus"] == "IssuesFound"
    assert status["step"] == result["steps"] == job.progress()["step"]
    assert status["mode"] == "TRAIN" and status["bundle"] is None
    assert "non-finite" in status["StatusDetails"]
    assert json.loads(job.stop_file.read_text())["requested_by"] == "nan_guard"
    trial = create_trial(job.store)
    assert trial.has_ended and trial.steps()[-1] == result["steps"] - 1

    # the same script, through its own flag, with a learning rate that trains
    calm = Job(job.root.parent / "calm")
    done = run(project, calm.env(), "regress.py", "--lr", "0.01", "--epochs", "40")
    assert done.returncode == 0, done.stderr
    assert calm.result()["status"] == "Completed" and calm.result()["steps"] == 40
    assert calm.result()["final_train_loss"] < 0.5 * calm.progress()["first_loss"]
    assert not calm.rule_status.exists()


def test_exploding_tensor_finds_the_divergence_in_the_store(job: Job, project: Path) -> None:
    write(project, "regress.py", DIVERGING_SCRIPT)
    env = job.env(gradients_every=1, REMEDY_NAN_GUARD="off")
    done = run(project, env, "regress.py", "--lr", "1.0", "--epochs", "120")
    assert done.returncode == 0, done.stderr
    assert "ran every epoch" in done.stdout  # the guard was off
    assert job.result()["status"] == "Completed"
    assert not job.rule_status.exists()

    rule = RuleConfig("ExplodingTensor", "ExplodingTensor", {"tensor_regex": ".*gradient"})
    evaluator = RuleEvaluator(
        create_trial(job.store), [rule], job.root / "evaluated", log=lambda line: None
    )
    evaluator.start()
    deadline = time.monotonic() + 60
    while not evaluator.poll():
        assert time.monotonic() < deadline
    record = evaluator.statuses["ExplodingTensor"]
    assert record.status is RuleStatus.ISSUES_FOUND
    assert record.tensor is not None and record.tensor.startswith("gradient/")


CORRUPT_RECORD_SCRIPT = """\
    import torch
    from torch import nn

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x = torch.randn(64, 4)
    y = x.sum(1, keepdim=True)
    for step in range(10):
        batch = x.clone()
        if step == 3:
            batch[0, 0] = float("inf")  # one corrupt record
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(batch), y)
        loss.backward()
        optimizer.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    print("weights finite")
"""


def test_nan_guard_skip_discards_a_bad_update_and_goes_on(job: Job, project: Path) -> None:
    write(project, "glitch.py", CORRUPT_RECORD_SCRIPT)
    done = run(project, job.env(REMEDY_NAN_GUARD="skip"), "glitch.py")
    assert done.returncode == 0, done.stderr
    assert "weights finite" in done.stdout  # the NaN update was never applied
    result = job.result()
    assert result["status"] == "Completed" and result["steps"] == 10
    assert result["final_train_loss"] is not None
    # tanh saturates: the loss stays finite, the first layer's gradient does not
    assert [m.get("grad_norm") is None for m in job.metrics()] == [False] * 3 + [True] + [False] * 6
    status = json.loads((job.rule_status / "NonFiniteGradient.json").read_text())
    assert status["RuleEvaluationStatus"] == "NoIssuesFound"
    assert status["step"] == 4 and status["bad_batches"] == 1
    assert status["steps_evaluated"] == 10  # the run's final word, once it ended
    assert "run ended, those updates skipped" in status["StatusDetails"]
    assert not job.stop_file.exists()


@pytest.mark.parametrize("how", ["stop file", "SIGTERM"])
def test_a_stop_request_ends_the_script_cleanly_within_seconds(
    job: Job, project: Path, how: str
) -> None:
    write(project, "endless.py", ENDLESS_SCRIPT)
    process = start(project, job.env(), "endless.py")
    try:
        wait_for_step(job, process, 5)
        asked = time.monotonic()
        if how == "SIGTERM":
            process.send_signal(signal.SIGTERM)
        else:
            job.stop_file.write_text("{}")
        stdout, stderr = process.communicate(timeout=60)
        took = time.monotonic() - asked
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert took < 5, took
    assert "the loop ended by itself" not in stdout
    result = job.result()
    assert result["status"] == "Stopped" and result["steps"] >= 5
    assert job.progress()["step"] == result["steps"]
    trial = create_trial(job.store)
    assert trial.has_ended and trial.steps()[-1] == result["steps"] - 1


def test_sigterm_outside_the_training_loop_stops_after_the_grace(job: Job, project: Path) -> None:
    write(project, "endless.py", ENDLESS_SCRIPT)
    process = start(project, job.env(), "endless.py", "--load-slowly")
    try:
        deadline = time.monotonic() + 60
        while not (project / "started").exists():
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.05)
        asked = time.monotonic()
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=60)
        took = time.monotonic() - asked
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert took < 6, took  # the 2 s grace, then interrupted in its sleep
    assert job.result() == {"status": "Stopped", "steps": 0, "final_train_loss": None}


def test_exit_status_and_traceback_are_the_scripts(job: Job, project: Path) -> None:
    write(project, "fails.py", "def load():\n    raise ValueError('no such dataset')\nload()\n")
    write(project, "exits.py", "import sys\nsys.exit(3)\n")
    done = run(project, job.env(), "fails.py")
    assert done.returncode == 1
    assert 'File "fails.py", line 3, in <module>' in done.stderr
    assert "ValueError: no such dataset" in done.stderr
    assert "launch.py" not in done.stderr and "runpy" not in done.stderr
    assert not (job.out / "result.json").exists()  # the backend reports the failure
    assert run(project, job.env(), "exits.py").returncode == 3
    assert run(project, job.env(REMEDY_NAN_GUARD="sometimes"), "exits.py").returncode == 2
    missing = run(project, job.env(), "missing.py")  # as `python missing.py`
    assert missing.returncode == 2 and "can't open file" in missing.stderr


RANK_TEARDOWN_SCRIPT = """\
    \"\"\"What an interpreter's teardown does for a script: a rank's end must do it too.\"\"\"
    import atexit
    import sys
    import threading
    import time

    import torch

    log = open("module-level.log", "w")  # never closed: its buffer is flushed at exit
    log.write("trained\\n")
    atexit.register(lambda: open("atexit-ran", "w").close())


    def late_writer() -> None:  # a non-daemon thread the interpreter waits for
        time.sleep(0.5)
        open("thread-finished", "w").close()


    threading.Thread(target=late_writer).start()
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.ones(4, 2)).pow(2).mean().backward()
        optimizer.step()
    print("no newline at the end", end="")
    sys.exit(int(sys.argv[1]))
"""


@pytest.mark.parametrize("status", [0, 3])
def test_a_torchrun_rank_ends_as_the_interpreter_would_have_ended_it(
    job: Job, project: Path, status: int
) -> None:
    """Under torchrun the launcher ends a rank without the interpreter's teardown (torch's
    gloo aborts finished ranks there): the script's exit status, atexit handlers, threads
    and open files' buffers are still the script's."""
    write(project, "rank.py", RANK_TEARDOWN_SCRIPT)
    env = job.env(LOCAL_RANK="0", RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1")
    done = run(project, env, "rank.py", str(status))
    assert done.returncode == status, done.stderr
    assert (project / "module-level.log").read_text() == "trained\n"
    assert (project / "atexit-ran").exists()
    assert (project / "thread-finished").exists()
    assert done.stdout.endswith("no newline at the end")
    assert ("finished after 3 steps" in done.stderr) == (status == 0)


def test_a_module_entry_point_with_relative_imports(job: Job, project: Path) -> None:
    write(project, "trainer/__init__.py", "")
    write(project, "trainer/data.py", "import torch\n\ndef batch():\n    return torch.ones(8, 2)\n")
    write(
        project,
        "trainer/main.py",
        """\
        import sys

        import torch

        from .data import batch

        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(int(sys.argv[2])):
            optimizer.zero_grad()
            model(batch()).pow(2).mean().backward()
            optimizer.step()
        print("ran as", __name__, sys.argv[1:])
        """,
    )
    done = run(project, job.env(), "-m", "trainer.main", "--steps", "3")
    assert done.returncode == 0, done.stderr
    assert "ran as __main__ ['--steps', '3']" in done.stdout
    assert job.result()["steps"] == 3
    assert sorted(create_trial(job.store).tensor_names(collection="gradients")) == [
        "gradient/bias", "gradient/weight",
    ]  # fmt: skip


COMPILED_SCRIPT = """\
    import json

    import torch
    from torch import nn
    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    wrapped = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    in_place = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    compiled = torch.compile(wrapped)
    in_place.compile()
    optimizer = torch.optim.SGD([*wrapped.parameters(), *in_place.parameters()], lr=0.05)
    x = torch.randn(32, 4)
    y = x.sum(1, keepdim=True)
    for _ in range(4):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(compiled(x), y) + nn.functional.mse_loss(in_place(x), y)
        loss.backward()
        optimizer.step()
    torch.save(compiled.state_dict(), "compiled.pt")
    print(json.dumps({"graph_breaks": dict(counters["graph_break"])}))
"""


@pytest.mark.slow
def test_torch_compile_works_and_the_hooks_break_no_graph(job: Job, project: Path) -> None:
    write(project, "compiled.py", COMPILED_SCRIPT)
    done = run(project, job.env(gradients_every=1), "compiled.py")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1]) == {"graph_breaks": {}}
    assert "global hooks" not in done.stderr  # torch's warning about them is ours to expect
    assert job.result()["steps"] == 4
    assert sorted(create_trial(job.store).tensor_names(collection="gradients")) == [
        "gradient/0.bias", "gradient/0.weight", "gradient/2.bias", "gradient/2.weight",
        "gradient/model1.0.bias", "gradient/model1.0.weight",
        "gradient/model1.2.bias", "gradient/model1.2.weight",
    ]  # fmt: skip
