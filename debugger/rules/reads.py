"""What a rule reads: the kinds of tensors a job must save for the rule to see anything.

A rule declares them (Rule.reads()), so a job's capture configuration is derived from its
rules (capture.py), as the managed service derived collections from its rules, and a rule
that has read nothing can say what it waited for.

Each kind maps onto one collection of the hook (and the tensor names the rules' default
regexes select):

    losses            "losses"       loss
    gradients         "gradients"    gradient/<param>
    weights, biases   "weights", "biases"
    activations       "activations"  <module>/<type>_output (e.g. layer1.0.act1/relu_output)
    activation_inputs "activations"  <module>/<type>_input  (the collection with save_inputs)
    inputs            "inputs"       input (the model's input batch)
    labels            "labels"       labels (class ids of the batch)
    predictions       "predictions"  predictions (predicted class ids)
    accuracy          "metrics"      accuracy (one value per epoch: AUTOTRAINER's semantics)
"""

from __future__ import annotations

import re
from collections.abc import Iterable

LOSSES = "losses"
GRADIENTS = "gradients"
WEIGHTS = "weights"
BIASES = "biases"
ACTIVATIONS = "activations"
ACTIVATION_INPUTS = "activation_inputs"
INPUTS = "inputs"
LABELS = "labels"
PREDICTIONS = "predictions"
ACCURACY = "accuracy"

KINDS: tuple[str, ...] = (
    LOSSES,
    GRADIENTS,
    WEIGHTS,
    BIASES,
    ACTIVATIONS,
    ACTIVATION_INPUTS,
    INPUTS,
    LABELS,
    PREDICTIONS,
    ACCURACY,
)

# The collection each kind is saved in.
COLLECTION_OF: dict[str, str] = {
    LOSSES: "losses",
    GRADIENTS: "gradients",
    WEIGHTS: "weights",
    BIASES: "biases",
    ACTIVATIONS: "activations",
    ACTIVATION_INPUTS: "activations",
    INPUTS: "inputs",
    LABELS: "labels",
    PREDICTIONS: "predictions",
    ACCURACY: "metrics",
}

# A typical tensor name of each kind, as the hook names it: a regex parameter is mapped
# onto the kinds whose typical name it matches (".*gradient" -> gradients).
_TYPICAL_NAMES: dict[str, tuple[str, ...]] = {
    LOSSES: ("loss",),
    GRADIENTS: ("gradient/layer1.0.conv1.weight", "gradient/fc.bias"),
    WEIGHTS: ("layer1.0.conv1.weight",),
    BIASES: ("fc.bias",),
    ACTIVATIONS: ("layer1.0.act1/relu_output", "1/tanh_output", "2/sigmoid_output"),
    ACTIVATION_INPUTS: ("layer1.0.act1/relu_input", "1/tanh_input", "2/sigmoid_input"),
    INPUTS: ("input",),
    LABELS: ("labels",),
    PREDICTIONS: ("predictions",),
    ACCURACY: ("accuracy",),
}


def kinds_of_collections(names: Iterable[str]) -> set[str]:
    """The kinds saved in these collections (collections of a user's own are not kinds)."""
    wanted = set(names)
    return {kind for kind, collection in COLLECTION_OF.items() if collection in wanted} - (
        {ACTIVATION_INPUTS} if ACTIVATIONS in wanted else set()
    )


def kinds_of_regex(pattern: str) -> set[str]:
    """The kinds whose typical tensor names `pattern` selects (re.match, as the rules
    select). A regex that selects every kind (".*") reads whatever the job saves: no kind
    is needed for it."""
    regex = re.compile(pattern)
    matched = {
        kind for kind, names in _TYPICAL_NAMES.items() if any(regex.match(name) for name in names)
    }
    return set() if matched == set(KINDS) else matched


def describe(kinds: Iterable[str]) -> str:
    """'activations (collection activations)' style words for messages."""
    parts = []
    for kind in sorted(set(kinds), key=KINDS.index):
        collection = COLLECTION_OF[kind]
        where = "with save_inputs" if kind == ACTIVATION_INPUTS else ""
        parts.append(f"{kind} (collection {collection!r}{' ' + where if where else ''})")
    return ", ".join(parts) or "any tensor"
