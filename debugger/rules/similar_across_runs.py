"""SimilarAcrossRuns: tensors differ from those of other runs at the same step."""

from __future__ import annotations

import numpy as np

from remedy.debugger.exceptions import DebuggerError
from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules.base import Rule, check_regex
from remedy.debugger.rules.registry import register_rule


@register_rule
class SimilarAcrossRuns(Rule):
    """Compares each selected tensor with the same tensor at the same step of every trial
    in `other_trials` (paths or s3:// URIs); fires when they are not allclose (a run that
    should be reproducible is not). Steps another run lacks are skipped."""

    name = "SimilarAcrossRuns"
    other_trials: list[str]
    collection_names: list[str] | None = None
    tensor_regex: str | None = None
    rtol: float = 1e-5
    atol: float = 1e-8

    def validate(self) -> None:
        if not self.other_trials:
            raise ValueError(f"{self.name}: parameter 'other_trials' must not be empty")
        check_regex(self.name, "tensor_regex", self.tensor_regex)

    def setup(self) -> None:
        from remedy.debugger.trial import create_trial

        self._others = [create_trial(path) for path in self.other_trials]

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        return self.select(step, mode, self.collection_names, self.tensor_regex)

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        for name in self.required_tensors(step, mode):
            mine = self.value(name, step, mode)
            for path, other in zip(self.other_trials, self._others, strict=True):
                try:
                    theirs = other.tensor(name).value(step, mode)
                except DebuggerError:
                    continue
                same = mine.shape == theirs.shape and np.allclose(
                    mine, theirs, rtol=self.rtol, atol=self.atol, equal_nan=True
                )
                if not same:
                    message = f"{name} differs from {path} at {mode.value} step {step}"
                    return self.fire(step, mode, name, message)
        return False
