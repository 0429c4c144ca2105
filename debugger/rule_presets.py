"""Rule presets: named rule sets a run selects instead of listing rules one by one.

    [{"preset": "recommended"}]                           every rule of the set
    [{"preset": "recommended"}, {"name": "Overfit", "rule": "Overfit"}]
    [{"name": "Overfit", "rule": "Overfit", "preset": "managed"}]
                                     one rule of a set, user parameters over the set's

- "recommended": the default of a run that names no rules. Each rule stays quiet on the
  healthy runs of benchmarks/rule_quality.py and together they catch its pathologies
  (early and late explosions, finite divergence, a stalled run, vanishing gradients, dead
  ReLUs), from losses, gradients and weights only: what zero-code capture saves too
  (capture.ZERO_CODE_KINDS), so any script can run it.
- "managed": the managed service's built-in rules that need no parameter, each with the
  service's documented defaults (Rule.LEGACY_DEFAULTS over ours): for compatibility with
  runs written for it. They cry wolf on healthy runs (README figures); ours do not.

A run_spec's rules are expanded here (the preflight checks them, the backends write the
expanded list to RULES.json), and a RULES.json may hold presets too.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from remedy.debugger.rules import RULES

# The managed service's built-in rules (the others are published detectors or ours).
MANAGED_RULES = (
    "VanishingGradient",
    "ExplodingTensor",
    "DeadRelu",
    "PoorWeightInitialization",
    "SaturatedActivation",
    "WeightUpdateRatio",
    "AllZero",
    "ClassImbalance",
    "LossNotDecreasing",
    "Overfit",
    "Overtraining",
    "SimilarAcrossRuns",
    "StalledTraining",
    "TensorVariance",
    "UnchangedTensor",
    "CheckInputImages",
    "Confusion",
)

# name, rule, parameters (over the rule's defaults). Why each: docs/debugger.md.
_RECOMMENDED: tuple[tuple[str, str, dict[str, Any]], ...] = (
    # NaN or inf in a gradient: the original workflow's only rule, as it configured it.
    ("ExplodingTensor", "ExplodingTensor", {"tensor_regex": ".*gradient", "only_nan": False}),
    # A loss above the untrained model's (finite divergence) or 10x its best. TRAIN only:
    # an evaluation's first loss is no untrained model's (the built-in job evaluates after
    # each epoch's training), and an evaluation's loss that climbs while training's falls
    # is overfitting or batch norm's running statistics, not divergence (a ReLU ResNet with
    # batch norm: its second evaluation at 5.3 against its first 2.5, stopped as diverging,
    # while its training loss fell to 0.28).
    ("DivergingLoss", "DivergingLoss", {"mode": "TRAIN"}),
    # The late explosion's first sign, and the step rollback_and_skip restarts before.
    ("LossSpike", "LossSpike", {}),
    # Updates tiny relative to the weights while the loss stays where it started: a
    # learning rate far too small, caught within two save intervals.
    ("TinyUpdates", "TinyUpdates", {}),
    # A loss that stops going down while far from converged (slower than TinyUpdates, and
    # whatever the cause), judged against its own noise over a window that grows with the
    # run (LossNotDecreasing's fixed 0.1 % stopped healthy runs of 600-1,000 steps), TRAIN
    # only: an evaluation's loss is no window of training.
    ("LossPlateau", "LossPlateau", {"mode": "TRAIN"}),
    # Weight gradients that stay vanishingly small.
    ("VanishingGradient", "VanishingGradient", {}),
    # Dead ReLUs seen from their gradients (no activations to save).
    ("DyingRelu", "DyingRelu", {}),
)


def recommended() -> list[dict[str, Any]]:
    return [
        {"name": name, "rule": rule, "parameters": copy.deepcopy(parameters)}
        for name, rule, parameters in _RECOMMENDED
    ]


def managed() -> list[dict[str, Any]]:
    """Each managed rule that builds with the service's defaults alone (AllZero,
    TensorVariance and SimilarAcrossRuns need parameters: name them yourself)."""
    configs = []
    for rule in MANAGED_RULES:
        parameters = copy.deepcopy(RULES[rule].LEGACY_DEFAULTS)
        try:
            RULES[rule].check_parameters(parameters)
        except ValueError:
            continue
        configs.append({"name": rule, "rule": rule, "parameters": parameters})
    return configs


PRESETS = {"recommended": recommended, "managed": managed}


def preset(name: str) -> list[dict[str, Any]]:
    """The rule configurations (RULES.json entries) of a preset; ValueError for an unknown
    name, with a did-you-mean."""
    if name not in PRESETS:
        close = difflib.get_close_matches(name, list(PRESETS), n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise ValueError(f"unknown rule preset {name!r}; {hint}presets: {sorted(PRESETS)}")
    return PRESETS[name]()


def expand_entry(entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One rules entry as the rule configurations it stands for: itself without a
    "preset"; the preset's rules (with the entry's actions, if any) for a preset alone;
    the preset's rule of that class with the entry's parameters over its own for a named
    rule of a preset. ValueError saying what is wrong."""
    if not isinstance(entry, Mapping) or entry.get("preset") is None:
        return [entry]  # type: ignore[list-item]  # RuleConfig.from_dict judges it
    name = entry["preset"]
    if not isinstance(name, str):
        raise ValueError(f"preset: must be a preset name, got {name!r}")
    configs = preset(name)
    # A run_spec's entry dumps its defaults too: an empty parameters object is none.
    rest = {key: value for key, value in entry.items() if key != "preset"}
    if rest.get("parameters") == {}:
        del rest["parameters"]
    if "name" not in rest and "rule" not in rest:
        unexpected = sorted(set(rest) - {"actions"})
        if unexpected:
            raise ValueError(f"preset {name!r} alone takes only actions, got {unexpected}")
        if "actions" in rest:
            configs = [config | {"actions": rest["actions"]} for config in configs]
        return configs
    rule = rest.get("rule", rest.get("name"))
    found = [config for config in configs if config["rule"] == rule]
    if not found:
        known = sorted(config["rule"] for config in configs)
        raise ValueError(f"preset {name!r} has no rule {rule!r}; it has {known}")
    if rest.get("rule_file") is not None:
        raise ValueError(f"preset {name!r}: a preset's rule is built in; rule_file excludes it")
    parameters = rest.get("parameters") or {}
    if not isinstance(parameters, Mapping):
        raise ValueError(f"parameters: must be an object, got {type(parameters).__name__}")
    return [rest | {"rule": rule, "parameters": found[0]["parameters"] | dict(parameters)}]


def expand_presets(entries: Sequence[Any]) -> list[Any]:
    """A rules list with every preset entry expanded (expand_entry); ValueError naming
    the entry (rules[i]) that is wrong."""
    expanded: list[Any] = []
    for index, entry in enumerate(entries):
        try:
            expanded.extend(expand_entry(entry))
        except ValueError as exc:
            raise ValueError(f"rules[{index}]: {exc}") from None
    return expanded
