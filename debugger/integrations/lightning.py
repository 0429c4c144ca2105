"""RemedyCallback for PyTorch Lightning: the tensor store and the stop file of a Trainer.

    from remedy.debugger.integrations.lightning import RemedyCallback
    trainer = lightning.pytorch.Trainer(callbacks=[RemedyCallback()], ...)

Needs `lightning` (or `pytorch_lightning`): pip install 'remedy-train[lightning]'. The class
derives from the Callback of each of the two packages that is installed, so it works with
`lightning.pytorch.Trainer` and `pytorch_lightning.Trainer` alike.

What it does, at Lightning's own hooks (debugger/integrations/common.py does the saving):
  - setup: creates the store (REMEDY_DEBUGGER_CONFIG, or the config / out_dir given) and
    registers the LightningModule for the activation and input collections. Under DDP each
    process writes its own part of the store (workers/worker_<rank>/), as the Hook does;
  - one TRAIN step per optimizer update, numbered by trainer.global_step (0 = the first
    update; a resumed run goes on from its checkpoint's step): begun at the update's first
    batch, "loss" = the sum of the losses backpropagated for it (on_before_backward;
    Lightning divides each by accumulate_grad_batches, so this is their mean),
    gradients/weights/biases at on_before_optimizer_step (before Lightning clips them),
    named by their path in the LightningModule ("net.0.weight");
  - one EVAL step per validation or test batch, "loss" = what validation_step / test_step
    returns (a tensor, or a dict's "loss"); one PREDICT step per predict batch;
  - after each training batch: when REMEDY_STOP_FILE (or stop_file) exists (as seen by any
    process: the decision is reduced over them), trainer.should_stop = True, so Lightning
    ends fit() after this batch;
  - at the end of each stage (teardown) the steps are flushed to disk; the store is closed
    (end.json) by close() or when the process exits, so a test() after fit() is captured.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import Any

_INSTALL = (
    "remedy.debugger.integrations.lightning needs PyTorch Lightning: "
    "pip install 'remedy-train[lightning]' (or lightning>=2.0)"
)

_bases: list[type] = []
try:
    from lightning.pytorch import Callback as _LightningCallback

    _bases.append(_LightningCallback)
except ImportError:
    pass
try:
    from pytorch_lightning import Callback as _PLCallback

    _bases.append(_PLCallback)
except ImportError:
    pass
if not _bases:
    raise ImportError(_INSTALL)

from remedy.debugger.config import HookConfig, SaveConfig  # noqa: E402
from remedy.debugger.hook import Hook  # noqa: E402
from remedy.debugger.integrations.common import (  # noqa: E402
    FrameworkCapture,
    loss_of,
    resolve_config,
    resolve_stop_file,
)
from remedy.debugger.modes import ModeKeys  # noqa: E402

__all__ = ["RemedyCallback"]


class RemedyCallback(*_bases):  # type: ignore[misc]
    """Saves a Lightning Trainer's losses and gradients to a remedy store and stops the
    Trainer when the job's stop file appears; see the module docstring."""

    def __init__(
        self,
        config: HookConfig | str | os.PathLike[str] | None = None,
        *,
        out_dir: str | os.PathLike[str] | None = None,
        collections: Mapping[str, SaveConfig | None] | Iterable[str] | None = None,
        save_config: SaveConfig | None = None,
        stop_file: str | os.PathLike[str] | None = None,
    ) -> None:
        """`config`: a HookConfig or its JSON file; or `out_dir` with `collections` and
        `save_config` as Hook() takes them; neither: the file REMEDY_DEBUGGER_CONFIG names
        (no store when it is unset). `stop_file`: default REMEDY_STOP_FILE."""
        super().__init__()
        store = resolve_config(
            config, out_dir=out_dir, collections=collections, save_config=save_config
        )
        self.capture = FrameworkCapture(store, resolve_stop_file(stop_file))

    @property
    def hook(self) -> Hook | None:
        """The store's writer (None before setup, on other ranks, or without a store):
        hook.save_tensor(name, value, collection) adds a tensor to the current step."""
        return self.capture.hook

    def close(self) -> None:
        """Write the last step and the store's end marker (end.json)."""
        self.capture.close()

    # -- Lightning's hooks ----------------------------------------------------------------

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.capture.start(pl_module)

    def on_train_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int
    ) -> None:
        self.capture.begin_train(trainer.global_step)

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self.capture.add_loss(loss, summed=True)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self.capture.end_update(trainer.global_step, pl_module.named_parameters())

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        # every process decides alike (one that stops alone would hang the others' DDP)
        if trainer.strategy.reduce_boolean_decision(self.capture.stop_requested(), all=False):
            trainer.should_stop = True

    def on_validation_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self.capture.begin(ModeKeys.EVAL)

    def on_validation_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.capture.save_loss(loss_of(outputs))
        self.capture.end_batch()

    def on_test_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self.capture.begin(ModeKeys.EVAL)

    def on_test_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.capture.save_loss(loss_of(outputs))
        self.capture.end_batch()

    def on_predict_batch_start(
        self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        self.capture.begin(ModeKeys.PREDICT)

    def on_predict_batch_end(
        self,
        trainer: Any,
        pl_module: Any,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        self.capture.end_batch()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.capture.flush()
