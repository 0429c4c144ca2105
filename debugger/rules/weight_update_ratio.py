"""WeightUpdateRatio: updates far too large or too small relative to the weights."""

from __future__ import annotations

import numpy as np

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.registry import register_rule


@register_rule
class WeightUpdateRatio(Rule):
    """ratio = ||w(step) - w(previous)|| / (||w(previous)|| + epsilon), between a weight's
    saved steps (or `num_steps` apart when set); fires when > large_threshold or
    < small_threshold. Keeps one copy of each weight between steps. `skip_biases`: biases
    (a last name part starting with "bias": fc.bias, and an LSTM's bias_ih_l0, which the hook
    saves among the weights) are not judged.

    Why skip biases (LEGACY_DEFAULTS judge them): a bias starts at or near zero (PyTorch
    zeroes many, an LSTM's are within 1/sqrt(hidden)), so its update/weight ratio is large
    by construction, not because updates are: the zoo's word LM at SGD 100 (clipped; its
    loss spikes and recovers to a healthy result) moves its LSTM biases 13.7x their initial
    norm in 10 steps, while its weights move less than 10x. The pathologies show in the
    weights: 34-57x for Adam at 1.0, 40-79x for an LSTM at SGD 1000, 0 for 12 sigmoid
    layers. Why not patience: an explosion's ratio is large in one save interval only (the
    weights then sit at their new scale and move little relative to it)."""

    name = "WeightUpdateRatio"
    num_steps: int | None = None
    large_threshold: float = 10.0
    small_threshold: float = 1e-8
    epsilon: float = 1e-9
    collection_names: list[str] | None = ["weights"]
    tensor_regex: str | None = None
    LEGACY_DEFAULTS = {"skip_biases": False}
    skip_biases: bool = True

    def setup(self) -> None:
        self._previous: dict[str, tuple[int, np.ndarray]] = {}

    def validate(self) -> None:
        check_regex(self.name, "tensor_regex", self.tensor_regex)
        if self.num_steps is not None and self.num_steps < 1:
            raise ValueError(f"{self.name}: parameter 'num_steps' must be >= 1")

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        names = self.select(step, mode, self.collection_names, self.tensor_regex, everything=False)
        if self.skip_biases:
            names = [name for name in names if not name.rsplit(".", 1)[-1].startswith("bias")]
        return names

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        if mode is not ModeKeys.TRAIN:
            return False
        for name in self.required_tensors(step, mode):
            current = np.asarray(self.value(name, step, mode), dtype=np.float64)
            previous = self._previous.get(name)
            due = previous is not None and (
                self.num_steps is None or step - previous[0] >= self.num_steps
            )
            if not due and previous is not None:
                continue  # keep comparing against the older copy
            self._previous[name] = (step, current)
            if previous is None:
                continue
            before = previous[1]
            ratio = np.linalg.norm(current - before) / (np.linalg.norm(before) + self.epsilon)
            if ratio > self.large_threshold or ratio < self.small_threshold:
                kind = "large" if ratio > self.large_threshold else "small"
                message = (
                    f"{name}: update/weight ratio {ratio:.3g} too {kind} between steps "
                    f"{previous[0]} and {step}"
                )
                return self.fire(step, mode, name, message)
        return False
