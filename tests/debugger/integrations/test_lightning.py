"""RemedyCallback for PyTorch Lightning: real training of a tiny model for a few steps, the
store read back through the trial.

The dev extra installs lightning (./bootstrap.sh --dev), so these tests run in CI: a
missing package fails them at collection, it never skips them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from remedy.debugger import SaveConfig, create_trial
from remedy.debugger.integrations.lightning import RemedyCallback

try:
    import lightning.pytorch as pl
except ImportError as exc:  # pragma: no cover - the dev extra installs it
    raise ImportError(
        "tests/debugger/integrations need lightning: ./bootstrap.sh --dev "
        "(or pip install 'remedy-train[lightning]')"
    ) from exc

EVERY = SaveConfig(save_interval=1)


class Regression(pl.LightningModule):
    """A LightningModule whose training_step calls a submodule, not its own forward."""

    def __init__(self, lr: float = 0.05, *, manual: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        self.lr = lr
        self.automatic_optimization = not manual
        self.train_losses: list[float] = []  # as training_step computed them
        self.val_losses: list[float] = []

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.train_losses.append(loss.item())
        if self.automatic_optimization:
            return loss
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(loss)
        optimizer.step()
        return None

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        x, y = batch
        loss = nn.functional.mse_loss(self.net(x), y)
        self.val_losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr)


class Gradients(pl.Callback):
    """Placed after RemedyCallback: the gradients each update applies, by global step."""

    def __init__(self) -> None:
        self.at: dict[int, dict[str, torch.Tensor]] = {}

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self.at[trainer.global_step] = {
            n: p.grad.clone() for n, p in pl_module.named_parameters() if p.grad is not None
        }


class TouchStopFile(pl.Callback):
    """Placed before RemedyCallback: the stop file appears after update `after`."""

    def __init__(self, path: Path, after: int) -> None:
        self.path, self.after = path, after

    def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
        if trainer.global_step == self.after:
            self.path.touch()


def loader(n: int = 64, batch_size: int = 8) -> DataLoader:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 4, generator=g)
    return DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=batch_size)


def trainer(callbacks: list[Any], **kwargs: Any) -> pl.Trainer:
    settings: dict[str, Any] = {
        "accelerator": "cpu",
        "devices": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "num_sanity_val_steps": 0,
        "max_epochs": 2,
    }
    return pl.Trainer(callbacks=callbacks, **settings | kwargs)


@pytest.fixture(autouse=True)
def no_job_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REMEDY_DEBUGGER_CONFIG", raising=False)
    monkeypatch.delenv("REMEDY_STOP_FILE", raising=False)


def test_one_step_per_update_numbered_by_the_global_step_with_its_loss_and_gradients(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    collections = {"losses": EVERY, "gradients": SaveConfig(save_interval=2), "weights": EVERY}
    callback, grads = RemedyCallback(out_dir=store, collections=collections), Gradients()
    model = Regression()
    fit = trainer([callback, grads], accumulate_grad_batches=2, limit_val_batches=2)
    fit.fit(model, loader(), loader())
    callback.close()

    trial = create_trial(store)
    assert trial.has_ended
    assert fit.global_step == 8  # 2 epochs of 8 batches, 2 batches per update
    assert trial.steps() == list(range(8))
    # the update's loss: Lightning backpropagates each micro-batch's loss / 2, their sum
    micro = model.train_losses
    for step in range(8):
        expected = (micro[2 * step] + micro[2 * step + 1]) / 2
        assert float(trial.tensor("loss").value(step)) == pytest.approx(expected, rel=1e-5)
    # gradients named by their path in the LightningModule, as the update got them
    names = ["net.0.bias", "net.0.weight", "net.2.bias", "net.2.weight"]
    assert trial.tensor_names(collection="gradients") == [f"gradient/{n}" for n in names]
    assert trial.tensor("gradient/net.0.weight").steps() == [0, 2, 4, 6]
    for step in (0, 2, 4, 6):
        for name in names:
            value = trial.tensor(f"gradient/{name}").value(step)
            torch.testing.assert_close(torch.from_numpy(value), grads.at[step][name])
    assert trial.tensor_names(collection="weights") == ["net.0.weight", "net.2.weight"]
    # validation: one EVAL step per batch, with what validation_step returned
    assert trial.steps(mode="EVAL") == [0, 1, 2, 3]  # 2 batches after each epoch
    evaluated = [float(v) for v in trial.tensor("loss").values(mode="EVAL").values()]
    assert evaluated == pytest.approx(model.val_losses, rel=1e-6)


def test_activations_go_into_the_updates_steps(tmp_path: Path) -> None:
    store = tmp_path / "store"
    callback = RemedyCallback(out_dir=store, collections={"losses": EVERY, "activations": EVERY})
    trainer([callback], max_epochs=1, limit_train_batches=3, limit_val_batches=0).fit(
        Regression(), loader()
    )
    callback.close()
    trial = create_trial(store)
    assert trial.steps() == [0, 1, 2]
    assert trial.tensor_names(collection="activations") == ["net.1/tanh_output"]
    assert trial.tensor("net.1/tanh_output").steps() == [0, 1, 2]


def test_manual_optimization_steps_follow_the_optimizer(tmp_path: Path) -> None:
    store = tmp_path / "store"
    callback = RemedyCallback(out_dir=store, collections={"losses": EVERY})
    model = Regression(manual=True)
    trainer([callback], max_epochs=1, limit_val_batches=0).fit(model, loader())
    callback.close()
    trial = create_trial(store)
    assert trial.steps() == list(range(8))
    losses = [float(v) for v in trial.tensor("loss").values().values()]
    assert losses == pytest.approx(model.train_losses, rel=1e-6)


def test_a_resumed_run_goes_on_from_its_checkpoints_step(tmp_path: Path) -> None:
    first = RemedyCallback(out_dir=tmp_path / "first", collections={"losses": EVERY})
    run = trainer([first], max_steps=3, max_epochs=-1, limit_val_batches=0)
    run.fit(Regression(), loader())
    run.save_checkpoint(tmp_path / "three.ckpt")
    first.close()

    second = RemedyCallback(out_dir=tmp_path / "second", collections={"losses": EVERY})
    resumed = trainer([second], max_steps=6, max_epochs=-1, limit_val_batches=0)
    resumed.fit(Regression(), loader(), ckpt_path=tmp_path / "three.ckpt")
    second.close()
    assert create_trial(tmp_path / "first").steps() == [0, 1, 2]
    assert create_trial(tmp_path / "second").steps() == [3, 4, 5]


def test_the_job_environment_configures_the_store_and_the_stop_file_stops_fit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "debugger.json"
    store, stop_file = tmp_path / "tensors", tmp_path / "stop-request"
    config.write_text(
        json.dumps({"out_dir": str(store), "collections": {"losses": {"save_interval": 1}}})
    )
    monkeypatch.setenv("REMEDY_DEBUGGER_CONFIG", str(config))
    monkeypatch.setenv("REMEDY_STOP_FILE", str(stop_file))
    callback = RemedyCallback()
    run = trainer([TouchStopFile(stop_file, after=3), callback], max_epochs=100)
    run.fit(Regression(), loader(), loader())
    callback.close()

    assert run.should_stop and run.global_step == 3  # ended after the batch that saw it
    assert create_trial(store).steps() == [0, 1, 2]


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="config or out_dir"):
        RemedyCallback("debugger.json", out_dir="store")
    with pytest.raises(ValueError, match="need out_dir"):
        RemedyCallback(collections=["losses"])
    # works with both Trainers when both packages are installed
    import pytorch_lightning

    assert isinstance(RemedyCallback(), pl.Callback | pytorch_lightning.Callback)


DDP_SCRIPT = """\
import os
import sys
from pathlib import Path

import lightning.pytorch as pl
import torch
from remedy.debugger import SaveConfig
from remedy.debugger.integrations.lightning import RemedyCallback
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


class TouchOnRankZero(pl.Callback):
    def on_train_batch_end(self, trainer, *args):
        if trainer.global_rank == 0 and trainer.global_step == 2:
            Path(sys.argv[2]).touch()


torch.manual_seed(0)
x = torch.randn(256, 4)
data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8)
every = SaveConfig(save_interval=1)
callback = RemedyCallback(
    out_dir=sys.argv[1], collections={"losses": every, "gradients": every}, stop_file=sys.argv[2]
)
trainer = pl.Trainer(
    max_epochs=1, accelerator="cpu", devices=2, strategy="ddp", logger=False,
    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    callbacks=[TouchOnRankZero(), callback],
)
trainer.fit(Tiny(), data)
callback.close()
# one write() per line: both ranks share the pipe, and separate pieces would interleave
os.write(1, f"rank {trainer.global_rank} stopped at {trainer.global_step}\\n".encode())
"""


def test_under_ddp_each_process_writes_its_part_and_all_stop_together(tmp_path: Path) -> None:
    """torchrun, 2 CPU processes (gloo): one store part per rank, the same steps and the
    averaged (equal) gradients in both; the stop file, seen by rank 0 alone, stops both
    after the same update (a rank stopping alone would hang the other)."""
    script = tmp_path / "ddp_fit.py"
    script.write_text(DDP_SCRIPT)
    store, stop_file = tmp_path / "store", tmp_path / "stop-request"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for name in ("REMEDY_DEBUGGER_CONFIG", "REMEDY_STOP_FILE", "RANK", "WORLD_SIZE"):
        env.pop(name, None)
    done = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
        + [f"--log-dir={tmp_path / 'torchrun'}"]  # not a torchelastic_* left in /tmp
        + [str(script), str(store), str(stop_file)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert sorted(line for line in done.stdout.splitlines() if "stopped at" in line) == [
        "rank 0 stopped at 2",
        "rank 1 stopped at 2",
    ]
    trial = create_trial(store)
    assert trial.has_ended and trial.workers() == ["worker_0", "worker_1"]
    assert trial.steps() == [0, 1]
    for step in (0, 1):
        values = [
            trial.tensor("gradient/net.0.weight").value(step, worker=worker)
            for worker in trial.workers()
        ]
        torch.testing.assert_close(torch.from_numpy(values[0]), torch.from_numpy(values[1]))
