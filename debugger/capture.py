"""A job's capture configuration, derived from the rules it runs (as the managed service
derived collections from its rules): each rule says what it reads (Rule.reads(), the kinds
of rules/reads.py) and the job saves exactly that, and what every job saves.

    config = capture_config(rules, out_dir="runs/job1/tensors", save_interval=100)
    # {"out_dir": ..., "save_config": {"save_interval": 100}, "collections": {...}}

What is saved when:
- losses every step and gradients every `save_interval` steps, whatever the rules (as the
  original workflow saved them; the loss curve and ExplodingTensor need them);
- weights, biases, activations, inputs every `save_interval` steps; activations also at the
  first EARLY_STEPS steps, which PoorWeightInitialization judges (it looks at
  initialisation, so only the first steps say anything);
- labels, predictions and the accuracy at every step they are offered: they are small, and
  ClassImbalance counts samples. A job saves "accuracy" once per epoch (EVAL mode, the
  test accuracy), the granularity OscillatingLoss and SlowConvergence take from
  AUTOTRAINER.

Zero-code capture (a script under the launcher) fills ZERO_CODE_KINDS only; the other
kinds need the explicit Hook or a framework callback in the script, or the built-in job.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from remedy.debugger.rules import Rule
from remedy.debugger.rules import reads as kinds

EARLY_STEPS = 10
ALWAYS: frozenset[str] = frozenset({kinds.LOSSES, kinds.GRADIENTS})
ZERO_CODE_KINDS: frozenset[str] = frozenset(
    {kinds.LOSSES, kinds.GRADIENTS, kinds.WEIGHTS, kinds.BIASES}
)
_EVERY_STEP = frozenset({kinds.LOSSES, kinds.LABELS, kinds.PREDICTIONS, kinds.ACCURACY})


def kinds_read(rules: Iterable[Rule]) -> set[str]:
    """Every kind some rule reads."""
    found: set[str] = set()
    for rule in rules:
        found |= rule.reads()
    return found


def capture_collections(wanted: Iterable[str], save_interval: int) -> dict[str, dict[str, Any]]:
    """The hook config's "collections" for these kinds (plus ALWAYS)."""
    wanted = set(wanted) | ALWAYS
    collections: dict[str, dict[str, Any]] = {}
    for kind in sorted(wanted, key=kinds.KINDS.index):
        name = kinds.COLLECTION_OF[kind]
        if name == "activations":
            continue  # below: one collection for outputs and inputs
        interval = 1 if kind in _EVERY_STEP else save_interval
        collections[name] = {"save_interval": interval}
    if wanted & {kinds.ACTIVATIONS, kinds.ACTIVATION_INPUTS}:
        collections["activations"] = {
            "save_interval": save_interval,
            "save_steps": list(range(EARLY_STEPS)),
            "save_inputs": kinds.ACTIVATION_INPUTS in wanted,
            "save_outputs": kinds.ACTIVATIONS in wanted,
        }
    return collections


def capture_config(rules: Iterable[Rule], out_dir: str, save_interval: int) -> dict[str, Any]:
    """The hook config file (REMEDY_DEBUGGER_CONFIG) of a job that runs these rules."""
    return {
        "out_dir": out_dir,
        "save_config": {"save_interval": save_interval},
        "collections": capture_collections(kinds_read(rules), save_interval),
    }
