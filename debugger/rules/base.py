"""Rule base class: a condition over a trial, checked one step at a time.

Writing a rule = one file in debugger/rules/ with one class:

    @register_rule
    class LossIsNegative(Rule):
        name = "LossIsNegative"        # registry key, used in RULES.json
        threshold: float = 0.0         # a parameter: annotation = type, value = default

        def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
            loss = float(self.trial.tensor("loss").value(step, mode))
            if loss < self.threshold:
                return self.fire(step, mode, "loss", f"loss {loss} < {self.threshold}")
            return False

Parameters are validated at construction: unknown names and wrong types raise ValueError.
An annotated parameter without a default is required. A rule keeps whatever state it needs
between steps (the evaluator invokes it once per new step, in global step order, over every
mode), so evaluating a run costs time linear in its length.
"""

from __future__ import annotations

import copy
import difflib
import math
import re
import statistics
import types
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules import reads

if TYPE_CHECKING:
    from remedy.debugger.trial import Trial


@dataclass(frozen=True)
class Finding:
    """Why a rule fired: where, on which tensor (if one), in words."""

    step: int
    mode: ModeKeys
    tensor: str | None
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"mode": self.mode.value}


class Rule:
    name: ClassVar[str] = ""
    # Kinds of tensors (reads.py) the rule reads whatever its parameters. Parameters that
    # select tensors add theirs (see reads()), so most rules need not list anything here.
    READS: ClassVar[tuple[str, ...]] = ()
    # False for rules about something else than tensors (time between steps): they never
    # count as "has read nothing".
    READS_TENSORS: ClassVar[bool] = True
    # The managed service's documented defaults where ours differ (ours stay quiet on
    # healthy runs; docs/debugger.md says why): pass them as parameters to get the
    # original behaviour, e.g. {"rule": "Overfit", "parameters": Overfit.LEGACY_DEFAULTS}.
    LEGACY_DEFAULTS: ClassVar[dict[str, Any]] = {}
    # Parameters a warm-started job's rules run with: what a rule would judge against its
    # store's first steps, which are then a trained model's, not an untrained one's.
    WARM_START: ClassVar[dict[str, Any]] = {}

    def __init__(self, trial: Trial, **params: Any) -> None:
        self.trial = trial
        self.finding: Finding | None = None
        self._assign(params)
        self.validate()
        self.setup()

    @classmethod
    def check_parameters(cls, params: Mapping[str, Any]) -> Rule:
        """The rule with `params` assigned and validated, but no trial and no setup(): raises
        ValueError naming the rule and parameter when `params` would not build it (unknown
        names, wrong types, values validate() refuses such as invalid regexes). A run's
        rules are checked with it, and their reads() derived, before anything launches."""
        rule = cls.__new__(cls)
        rule.finding = None
        rule._assign(dict(params))
        rule.validate()
        return rule

    def reads(self) -> set[str]:
        """Kinds of tensors (reads.py) this rule reads with its parameters: READS, plus
        what its selecting parameters name: `collection_names` / `collection` (collections)
        and any parameter ending in `_regex` (the kinds whose tensor names it matches).
        Empty: the rule reads whatever the job saves (ExplodingTensor over every tensor)."""
        kinds = set(self.READS)
        for key in self.parameter_types():
            value = getattr(self, key, None)
            if key == "collection_names" and isinstance(value, list):
                kinds |= reads.kinds_of_collections(value)
            elif key == "collection" and isinstance(value, str):
                kinds |= reads.kinds_of_collections([value])
            elif key.endswith("_regex") and isinstance(value, str):
                kinds |= reads.kinds_of_regex(value)
        return kinds

    def _assign(self, params: Mapping[str, Any]) -> None:
        spec = self.parameter_types()
        for key in params:
            if key not in spec:
                close = difflib.get_close_matches(key, list(spec), n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ValueError(
                    f"{self.name}: unknown parameter {key!r}; {hint}expected one of {sorted(spec)}"
                )
        for key, hint in spec.items():
            if key in params:
                value = params[key]
            elif hasattr(type(self), key):
                value = copy.deepcopy(getattr(type(self), key))  # never share mutable defaults
            else:
                raise ValueError(f"{self.name}: missing required parameter {key!r}")
            if not _matches(value, hint):
                raise ValueError(
                    f"{self.name}: parameter {key!r} must be {_describe(hint)}, got {value!r}"
                )
            setattr(self, key, value)

    @classmethod
    def parameter_types(cls) -> dict[str, Any]:
        """{parameter: type} from the annotations of Rule subclasses (ClassVars excluded)."""
        spec: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            if klass is Rule or not issubclass(klass, Rule):
                continue
            hints = typing.get_type_hints(klass)
            for key in klass.__dict__.get("__annotations__", {}):
                if typing.get_origin(hints[key]) is not ClassVar:
                    spec[key] = hints[key]
        return spec

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        return {key: getattr(cls, key) for key in cls.parameter_types() if hasattr(cls, key)}

    def validate(self) -> None:
        """Override for checks across parameters; raise ValueError naming the parameter."""

    def setup(self) -> None:
        """Override to create the state a rule keeps between steps (after validation)."""

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        """True when the condition is met at this step (then self.finding says why)."""
        raise NotImplementedError

    def invoke_idle(self) -> bool:
        """Called by the evaluator at polls that bring no new step while the job runs;
        for rules about time (a stalled job). True when the condition is met."""
        return False

    def required_tensors(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> list[str]:
        """Tensor names this rule reads at `step` (for listings and offline checks)."""
        return []

    # -- helpers for rule files -----------------------------------------------------------

    def select(
        self,
        step: int,
        mode: ModeKeys,
        collection_names: list[str] | None = None,
        tensor_regex: str | None = None,
        everything: bool = True,
    ) -> list[str]:
        """Names saved at `step` in any of the collections or matching the regex
        (re.match); with neither, every tensor (or none when everything=False)."""
        trial = self.trial
        if collection_names is None and tensor_regex is None:
            return trial.tensor_names(mode=mode, step=step) if everything else []
        names: set[str] = set()
        for collection in collection_names or []:
            names.update(trial.tensor_names(collection=collection, mode=mode, step=step))
        if tensor_regex is not None:
            names.update(trial.tensor_names(regex=tensor_regex, mode=mode, step=step))
        return sorted(names)

    def value(self, name: str, step: int, mode: ModeKeys) -> np.ndarray:
        return self.trial.tensor(name).value(step, mode)

    def reduction(self, name: str, step: int, mode: ModeKeys, how: str, abs: bool = False) -> float:
        """A reduction, saved by the hook or computed from the raw tensor."""
        return self.trial.tensor(name).reduction_value(step, how, mode, abs=abs)

    def loss_at(self, step: int, mode: ModeKeys) -> tuple[str, float] | None:
        """(name, value) of the step's loss (collection "losses", else a tensor "loss")."""
        names = self.select(step, mode, ["losses"], None, everything=False)
        if not names:
            names = self.trial.tensor_names(regex="loss$", mode=mode, step=step)
        if not names:
            return None
        name = names[0]
        return name, self.reduction(name, step, mode, "mean")

    def fire(self, step: int, mode: ModeKeys, tensor: str | None, message: str) -> bool:
        """Record the finding; returns True so rules can `return self.fire(...)`."""
        self.finding = Finding(step=step, mode=mode, tensor=tensor, message=message)
        return True


class LossWindowRule(Rule):
    """Base of the rules over the mean loss of consecutive windows of `num_steps` saved
    steps, kept per mode (`mode`: only that mode's losses). A subclass says what a window's
    mean means in `window_ended`."""

    READS = (reads.LOSSES,)
    num_steps: int = 10
    mode: str | None = None

    def validate(self) -> None:
        if self.num_steps < 1:
            raise ValueError(f"{self.name}: parameter 'num_steps' must be >= 1")
        if self.mode is not None:
            self.mode = ModeKeys.parse(self.mode).value

    def setup(self) -> None:
        self._window: dict[ModeKeys, list[float]] = {}
        # The first window's mean per mode: the loss of the barely trained model, the
        # scale a loss near 0 is judged against (about ln(classes) for a classifier).
        self._first: dict[ModeKeys, float] = {}
        self._early: dict[ModeKeys, list[float]] = {}  # the first EARLY_STEPS losses

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        if self.mode is not None and mode.value != self.mode:
            return False
        loss = self.loss_at(step, mode)
        if loss is None:
            return False
        window = self._window.setdefault(mode, [])
        window.append(loss[1])
        early = self._early.setdefault(mode, [])
        if len(early) < EARLY_STEPS:
            early.append(loss[1])
        if len(window) < self.num_steps:
            return False
        mean = sum(window) / len(window)
        self._first.setdefault(mode, mean)
        window.clear()  # the next window starts empty
        return self.window_ended(step, mode, loss[0], mean)

    def window_ended(self, step: int, mode: ModeKeys, loss: str, mean: float) -> bool:
        """True when a window's `mean` of the tensor `loss`, ending at `step`, fires."""
        raise NotImplementedError

    def first_mean(self, mode: ModeKeys) -> float | None:
        """The mean of the mode's first window (None before it ended)."""
        return self._first.get(mode)

    def early_noise(self, mode: ModeKeys) -> float:
        """How far one step's loss strays from the next over the mode's first EARLY_STEPS
        steps seen so far: its batches' noise (step_noise)."""
        return step_noise(self._early.get(mode, []))


EARLY_STEPS = 50  # the steps whose losses tell a job's batch noise (LossWindowRule)


def step_noise(losses: list[float]) -> float:
    """The standard deviation of one step's loss about its trend, from the median of the
    successive differences' sizes (over 0.954, which makes it one for Gaussian noise): a
    loss falling or rising steadily adds nothing, a jump or two of a divergence next to
    nothing. 0 for fewer than 2 finite losses."""
    steps = [abs(b - a) for a, b in zip(losses, losses[1:], strict=False)]
    steps = [d for d in steps if math.isfinite(d)]
    return statistics.median(steps) / (0.6745 * math.sqrt(2)) if steps else 0.0


def check_regex(rule: str, key: str, pattern: str | None) -> None:
    """Raise ValueError naming the parameter when `pattern` does not compile."""
    if pattern is None:
        return
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"{rule}: parameter {key!r} is not a valid regex: {exc}") from None


def unit_fraction(mask: np.ndarray) -> np.ndarray:
    """Per unit (axis 1: feature or channel) share of True over the batch and any spatial
    axes; a 1-d tensor counts as one unit."""
    mask = np.asarray(mask, dtype=np.float64)
    if mask.ndim < 2:
        return np.array([mask.mean()]) if mask.size else np.array([])
    axes = tuple(i for i in range(mask.ndim) if i != 1)
    return mask.mean(axis=axes)


def _matches(value: Any, hint: Any) -> bool:
    """A small isinstance for the parameter types rules use (JSON-shaped values)."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in args)
    if origin is typing.Literal:
        return value in args
    if origin is list:
        return isinstance(value, list) and all(_matches(v, args[0]) for v in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(hint, type) and isinstance(value, hint)


def _describe(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) else str(hint)
