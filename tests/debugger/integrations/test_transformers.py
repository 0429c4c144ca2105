"""RemedyCallback for the Hugging Face Trainer: a tiny GPT-2 built from a config (nothing
downloaded) trained on random tokens for a few steps, the store read back through the trial.

The dev extra installs transformers and accelerate (./bootstrap.sh --dev), so these tests run
in CI: a missing package fails them at collection, it never skips them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import Dataset

from remedy.debugger import SaveConfig, create_trial
from remedy.debugger.integrations.transformers import RemedyCallback

try:
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )
except ImportError as exc:  # pragma: no cover - the dev extra installs it
    raise ImportError(
        "tests/debugger/integrations need transformers and accelerate: ./bootstrap.sh --dev "
        "(or pip install 'remedy-train[transformers]')"
    ) from exc

EVERY = SaveConfig(save_interval=1)


class Tokens(Dataset):
    def __init__(self, n: int, seed: int) -> None:
        self.ids = torch.randint(0, 64, (n, 16), generator=torch.Generator().manual_seed(seed))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


class Gradients(TrainerCallback):
    """Placed after RemedyCallback: the gradients each update applies, by global step."""

    def __init__(self) -> None:
        self.at: dict[int, dict[str, torch.Tensor]] = {}

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        model = kw["model"]
        self.at[state.global_step] = {
            n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None
        }


class TouchStopFile(TrainerCallback):
    """Placed before RemedyCallback: the stop file appears after update `after`."""

    def __init__(self, path: Path, after: int) -> None:
        self.path, self.after = path, after

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.global_step == self.after:
            self.path.touch()


def tiny_gpt2() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=64,
        n_positions=16,
        n_embd=16,
        n_layer=2,
        n_head=2,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(config)


def arguments(out: Path, **kwargs: Any) -> TrainingArguments:
    settings: dict[str, Any] = {
        "output_dir": str(out),
        "per_device_train_batch_size": 4,
        "per_device_eval_batch_size": 4,
        "learning_rate": 1e-3,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "use_cpu": True,
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }
    return TrainingArguments(**settings | kwargs)


@pytest.fixture(autouse=True)
def no_job_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("REMEDY_DEBUGGER_CONFIG", raising=False)
    monkeypatch.delenv("REMEDY_STOP_FILE", raising=False)


def test_one_step_per_update_numbered_by_the_global_step_with_its_loss_and_gradients(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    collections = {"losses": EVERY, "gradients": SaveConfig(save_interval=2)}
    callback, grads = RemedyCallback(out_dir=store, collections=collections), Gradients()
    args = arguments(
        tmp_path / "hf",
        max_steps=4,
        gradient_accumulation_steps=2,
        eval_strategy="steps",
        eval_steps=2,
    )
    trainer = Trainer(
        model=tiny_gpt2(),
        args=args,
        train_dataset=Tokens(64, seed=1),
        eval_dataset=Tokens(8, seed=2),
        callbacks=[callback, grads],
    )
    trainer.train()
    callback.close()

    trial = create_trial(store)
    assert trial.has_ended
    assert trial.steps() == [0, 1, 2, 3]
    # the Trainer logs each update's loss (logging_steps=1): store step N is its step N + 1
    history = trainer.state.log_history
    logged = {h["step"]: h["loss"] for h in history if "loss" in h}
    for step in range(4):
        loss = float(trial.tensor("loss").value(step))
        assert loss == pytest.approx(logged[step + 1], rel=1e-5)
    names = trial.tensor_names(collection="gradients")
    assert "gradient/transformer.h.0.attn.c_attn.weight" in names
    assert len(names) == len([n for n, p in trainer.model.named_parameters() if p.requires_grad])
    for step in (0, 2):
        for name, grad in grads.at[step].items():  # after the Trainer's clipping
            value = trial.tensor(f"gradient/{name}").value(step)
            torch.testing.assert_close(torch.from_numpy(value), grad)
    # evaluation after updates 2 and 4: 2 batches each, one EVAL step per batch
    assert trial.steps(mode="EVAL") == [0, 1, 2, 3]
    evaluated = [float(v) for v in trial.tensor("loss").values(mode="EVAL").values()]
    evaluations = {h["step"]: h["eval_loss"] for h in history if "eval_loss" in h}
    assert sum(evaluated[:2]) / 2 == pytest.approx(evaluations[2], rel=1e-5)
    assert sum(evaluated[2:]) / 2 == pytest.approx(evaluations[4], rel=1e-5)


def test_the_job_environment_configures_the_store_and_the_stop_file_stops_training(
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
    trainer = Trainer(
        model=tiny_gpt2(),
        args=arguments(tmp_path / "hf", max_steps=1000),
        train_dataset=Tokens(64, seed=1),
        callbacks=[TouchStopFile(stop_file, after=2), callback],
    )
    trainer.train()
    callback.close()

    assert trainer.state.global_step == 2  # ended after the update that saw it
    assert create_trial(store).steps() == [0, 1]


def test_without_a_store_the_callback_only_stops(tmp_path: Path) -> None:
    stop_file = tmp_path / "stop-request"
    stop_file.touch()
    callback = RemedyCallback(stop_file=stop_file)
    trainer = Trainer(
        model=tiny_gpt2(),
        args=arguments(tmp_path / "hf", max_steps=1000),
        train_dataset=Tokens(16, seed=1),
        callbacks=[callback],
    )
    trainer.train()
    assert callback.hook is None
    assert trainer.state.global_step == 1
