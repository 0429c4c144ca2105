"""Tensors the built-in job saves only when a rule reads them (the capture configuration,
derived from the run's rules, lists their collections; debugger/capture.py): the labels and
predicted classes of each batch (ClassImbalance, Confusion) and the test accuracy of each
epoch (OscillatingLoss, SlowConvergence: AUTOTRAINER judges one value per epoch)."""

from __future__ import annotations

import torch

from remedy.debugger import Hook


def save_classification(hook: Hook | None, logits: torch.Tensor, labels: torch.Tensor) -> None:
    """The batch's labels and predictions, into the current step (before its update)."""
    if hook is None:
        return
    # A collection nobody configured would still be saved at the default interval.
    if "labels" in hook.config.collections:
        hook.save_tensor("labels", labels, collection="labels")
    if "predictions" in hook.config.collections:
        hook.save_tensor("predictions", logits.argmax(dim=1), collection="predictions")


def save_accuracy(hook: Hook | None, accuracy: float) -> None:
    """An epoch's test accuracy, into the last EVAL step (still open after evaluation)."""
    if hook is not None and "metrics" in hook.config.collections:
        hook.save_tensor("accuracy", torch.tensor(accuracy), collection="metrics")
