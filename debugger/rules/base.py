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
An annotated parameter without a default is required.
"""

from __future__ import annotations

import copy
import types
import typing
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from debugger.modes import ModeKeys

if TYPE_CHECKING:
    from debugger.trial import Trial


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

    def __init__(self, trial: Trial, **params: Any) -> None:
        self.trial = trial
        self.finding: Finding | None = None
        spec = self.parameter_types()
        for key in params:
            if key not in spec:
                raise ValueError(
                    f"{self.name}: unknown parameter {key!r}; expected one of {sorted(spec)}"
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
        self.validate()

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

    def invoke_at_step(self, step: int, mode: ModeKeys = ModeKeys.TRAIN) -> bool:
        """True when the condition is met at this step (then self.finding says why)."""
        raise NotImplementedError

    def fire(self, step: int, mode: ModeKeys, tensor: str | None, message: str) -> bool:
        """Record the finding; returns True so rules can `return self.fire(...)`."""
        self.finding = Finding(step=step, mode=mode, tensor=tensor, message=message)
        return True


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
