"""Unmodified PyTorch Lightning and Hugging Face Trainer scripts under the launcher:
capture, progress files, the NaN guard and the stop file, as for a plain PyTorch loop.

The scripts carry no remedy code (one Lightning script adds RemedyCallback when asked, to
show the explicit callback and the launcher together). Tiny models, random data, nothing
downloaded. The dev extra installs lightning and transformers (./bootstrap.sh --dev), so
these tests run in CI: a missing package fails them, it never skips them."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import time
from pathlib import Path

import pytest

from remedy.debugger import create_trial
from tests.helpers.launched_script import Job, launch_command, run, wait_for_step, write

for _package in ("lightning", "transformers", "accelerate"):
    if importlib.util.find_spec(_package) is None:  # pragma: no cover - the dev extra has it
        raise ImportError(
            f"tests/training/test_launch_frameworks.py needs {_package}: ./bootstrap.sh --dev "
            "(or pip install 'remedy-train[lightning,transformers]')"
        )

LIGHTNING_SCRIPT = """\
    import argparse
    import json

    import lightning.pytorch as pl
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset


    class Regression(pl.LightningModule):
        def __init__(self, lr):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 1))
            self.lr = lr
            self.losses = []

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.mse_loss(self.net(x), y)
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=self.lr)


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--lr", type=float, default=0.05)
        parser.add_argument("--epochs", type=int, default=2)
        parser.add_argument("--accumulate", type=int, default=1)
        parser.add_argument("--callback", action="store_true")
        args = parser.parse_args()
        callbacks = []
        if args.callback:
            from remedy.debugger.integrations.lightning import RemedyCallback

            callbacks.append(RemedyCallback())
        torch.manual_seed(0)
        x = torch.randn(64, 4)
        data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
        model = Regression(args.lr)
        trainer = pl.Trainer(
            max_epochs=args.epochs, accelerator="cpu", logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, callbacks=callbacks,
            accumulate_grad_batches=args.accumulate,
        )
        trainer.fit(model, data)
        with open("losses.json", "w") as f:
            json.dump(model.losses, f)
        print("fit ended at global step", trainer.global_step)
"""

HF_SCRIPT = """\
    import argparse
    import json

    import torch
    from torch.utils.data import Dataset
    from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments


    class Tokens(Dataset):
        def __init__(self, n):
            self.ids = torch.randint(0, 64, (n, 16), generator=torch.Generator().manual_seed(0))

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, i):
            return {"input_ids": self.ids[i], "labels": self.ids[i]}


    if __name__ == "__main__":
        parser = argparse.ArgumentParser()
        parser.add_argument("--learning-rate", type=float, default=1e-3)
        parser.add_argument("--max-steps", type=int, default=6)
        args = parser.parse_args()
        torch.manual_seed(0)
        config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=2, n_head=2,
                            bos_token_id=0, eos_token_id=0)
        training = TrainingArguments(
            output_dir="hf-output", max_steps=args.max_steps, per_device_train_batch_size=4,
            learning_rate=args.learning_rate, logging_steps=1, save_strategy="no",
            report_to="none", use_cpu=True, disable_tqdm=True,
        )
        trainer = Trainer(model=GPT2LMHeadModel(config), args=training, train_dataset=Tokens(64))
        trainer.train()
        with open("history.json", "w") as f:
            json.dump(trainer.state.log_history, f)
"""


@pytest.fixture
def job(tmp_path: Path) -> Job:
    return Job(tmp_path / "job")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    write(folder, "fit.py", LIGHTNING_SCRIPT)
    write(folder, "hf_train.py", HF_SCRIPT)
    return folder


def test_a_lightning_script_is_captured_one_step_per_update(job: Job, project: Path) -> None:
    done = run(project, job.env(gradients_every=2), "fit.py", "--accumulate", "2")
    assert done.returncode == 0, done.stderr
    assert "fit ended at global step 8" in done.stdout
    result = job.result()
    assert result["status"] == "Completed" and result["steps"] == 8
    # Lightning runs the forward and backward inside optimizer.step(closure): each step's
    # loss is its own update's (the mean of what was backpropagated: Lightning divides
    # each micro-batch's loss by accumulate_grad_batches)
    micro = json.loads((project / "losses.json").read_text())
    metrics = job.metrics()
    assert [m["step"] for m in metrics] == list(range(1, 9))
    for record in metrics:
        step = record["step"]
        expected = (micro[2 * step - 2] + micro[2 * step - 1]) / 2 / 2
        assert record["loss"] == pytest.approx(expected, rel=1e-5)
        assert record["grad_norm"] > 0 and record["learning_rate"] == 0.05
    assert job.progress()["first_loss"] == metrics[0]["loss"]
    trial = create_trial(job.store)
    assert trial.has_ended and trial.steps() == list(range(8))
    # names are paths in the outermost module the script calls: training_step calls self.net
    assert trial.tensor_names(collection="gradients") == [
        f"gradient/{n}" for n in ("0.bias", "0.weight", "2.bias", "2.weight")
    ]
    assert trial.tensor("gradient/0.weight").steps() == [0, 2, 4, 6]


def test_a_diverging_lightning_script_is_stopped_by_the_nan_guard(job: Job, project: Path) -> None:
    done = run(project, job.env(gradients_every=1), "fit.py", "--lr", "1e6")
    assert done.returncode == 0, done.stderr
    result = job.result()
    assert result["status"] == "Stopped" and result["final_train_loss"] is None
    status = json.loads((job.rule_status / "NonFiniteGradient.json").read_text())
    assert status["RuleEvaluationStatus"] == "IssuesFound"
    assert status["step"] == result["steps"] == job.progress()["step"]
    metrics = job.metrics()
    assert metrics[0]["loss"] is not None  # the first update's own loss
    assert metrics[-1]["loss"] is None  # the non-finite update, not applied
    assert all(m["loss"] is not None for m in metrics[:-1])
    assert create_trial(job.store).steps()[-1] == result["steps"] - 1


def test_a_lightning_script_with_the_callback_stops_on_the_stop_file(
    job: Job, project: Path
) -> None:
    process = subprocess.Popen(
        launch_command("fit.py", "--epochs", "100000", "--callback"),
        cwd=project,
        env=job.env(gradients_every=1),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_step(job, process, 5)
        asked = time.monotonic()
        job.stop_file.write_text("{}")
        stdout, stderr = process.communicate(timeout=60)
        took = time.monotonic() - asked
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert took < 10, took
    result = job.result()
    assert result["status"] == "Stopped" and result["steps"] >= 5
    # the callback's store (the zero-code capture leaves it alone), named in the module
    assert "already holds a store" in stderr
    trial = create_trial(job.store)
    assert "gradient/net.0.weight" in trial.tensor_names(collection="gradients")
    assert trial.steps()[-1] >= result["steps"] - 1


def test_a_hugging_face_trainer_script_is_captured_one_step_per_update(
    job: Job, project: Path
) -> None:
    done = run(project, job.env(gradients_every=3), "hf_train.py")
    assert done.returncode == 0, done.stderr
    result = job.result()
    assert result["status"] == "Completed" and result["steps"] == 6
    history = json.loads((project / "history.json").read_text())
    logged = {h["step"]: h for h in history if "loss" in h}
    metrics = job.metrics()
    assert [m["step"] for m in metrics] == list(range(1, 7))
    for record in metrics:  # the Trainer's own logged loss and (pre-clipping) grad norm
        assert record["loss"] == pytest.approx(logged[record["step"]]["loss"], rel=1e-5)
        assert record["grad_norm"] <= logged[record["step"]]["grad_norm"] * (1 + 1e-6)
    trial = create_trial(job.store)
    assert trial.has_ended and trial.steps() == list(range(6))
    assert "gradient/transformer.h.0.attn.c_attn.weight" in trial.tensor_names()
    assert trial.tensor("gradient/transformer.wte.weight").steps() == [0, 3]


def test_a_diverging_hugging_face_trainer_script_is_stopped_by_the_nan_guard(
    job: Job, project: Path
) -> None:
    done = run(project, job.env(), "hf_train.py", "--learning-rate", "1e8", "--max-steps", "50")
    assert done.returncode == 0, done.stderr
    result = job.result()
    assert result["status"] == "Stopped" and result["steps"] < 50
    status = json.loads((job.rule_status / "NonFiniteGradient.json").read_text())
    assert status["RuleEvaluationStatus"] == "IssuesFound"
    assert status["step"] == result["steps"]


def test_a_hugging_face_trainer_script_stops_on_the_stop_file(job: Job, project: Path) -> None:
    process = subprocess.Popen(
        launch_command("hf_train.py", "--max-steps", "100000"),
        cwd=project,
        env=job.env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_step(job, process, 5)
        asked = time.monotonic()
        job.stop_file.write_text("{}")
        stdout, stderr = process.communicate(timeout=60)
        took = time.monotonic() - asked
    finally:
        process.kill()
    assert process.returncode == 0, stderr
    assert took < 10, took
    result = job.result()
    assert result["status"] == "Stopped" and result["steps"] >= 5
    assert create_trial(job.store).has_ended
