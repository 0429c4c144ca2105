"""A remediation strategy: one small class that changes named hyperparameters of a run_spec.

Adding a strategy means adding one file with a subclass decorated by @register_strategy.
"""

from __future__ import annotations

from typing import ClassVar

from remedy.state_schema import RunSpec, State

STRATEGIES: dict[str, type[Strategy]] = {}


class Strategy:
    name: ClassVar[str]
    addresses: ClassVar[tuple[str, ...]] = ()  # rule/finding names it repairs; () = any
    changes: ClassVar[tuple[str, ...]] = ()  # run_spec fields it may change
    changes_architecture: ClassVar[bool] = False
    counter: ClassVar[str | None] = None  # history counter incremented when applied
    explanation: ClassVar[str] = ""  # one line for notifications and reports

    @classmethod
    def keeps_weights(cls) -> bool:
        """True when the weights of an earlier attempt still fit and mean the same: such a
        strategy may warm-start from a checkpoint. A new initialisation would be overwritten
        by the checkpoint, so it counts as not keeping them."""
        return not cls.changes_architecture and "init" not in cls.changes

    @classmethod
    def understood_by(cls, spec: RunSpec) -> bool:
        """True when the entry point honours every hyperparameter this strategy changes."""
        understood = spec.hyperparameters_understood
        return understood is None or set(cls.changes) <= set(understood)

    def applies(self, spec: RunSpec) -> bool:
        """True when this strategy can still change something in spec."""
        raise NotImplementedError

    def apply(self, spec: RunSpec) -> RunSpec:
        """The spec for the next launch."""
        raise NotImplementedError

    def reason(self, before: RunSpec, after: RunSpec) -> str:
        changed = ", ".join(
            f"{field} {getattr(before, field)} -> {getattr(after, field)}"
            for field in self.changes
            if getattr(before, field) != getattr(after, field)
        )
        return f"{self.explanation} ({changed})" if changed else self.explanation

    def bump_counter(self, state: State) -> State:
        if self.counter is None:
            return state
        history = state.history.model_copy(
            update={self.counter: getattr(state.history, self.counter) + 1}
        )
        return state.model_copy(update={"history": history})


def register_strategy(cls: type[Strategy]) -> type[Strategy]:
    if cls.name in STRATEGIES:
        raise ValueError(f"strategy {cls.name!r} is registered twice")
    STRATEGIES[cls.name] = cls
    return cls


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]()
    except KeyError:
        known = ", ".join(sorted(STRATEGIES))
        raise ValueError(f"unknown strategy {name!r}; known: {known}") from None
