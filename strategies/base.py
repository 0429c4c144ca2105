"""A remediation strategy: one small class that changes hyperparameter roles of a run_spec.

Adding a strategy means adding one file with a subclass decorated by @register_strategy.
A strategy does not say which findings it repairs: the policies decide that (the adaptive
policy's orders, keyed by the trouble a rule class detects), so the fact lives in one place.
"""

from __future__ import annotations

from typing import ClassVar

from remedy.state_schema import RunSpec, State
from remedy.state_schema.flags import flag_label
from remedy.state_schema.roles import ROLES

STRATEGIES: dict[str, type[Strategy]] = {}


class Strategy:
    """A strategy changes hyperparameter *roles* (state_schema.roles), never a run_spec field
    directly: it reads spec.role(name) and returns spec.with_roles({...}), so the same class
    repairs the built-in job (its fields) and a user's script (the flags it maps)."""

    name: ClassVar[str]
    changes: ClassVar[tuple[str, ...]] = ()  # every role it may change
    optional: ClassVar[tuple[str, ...]] = ()  # of those, the ones it adjusts only when mapped
    reads: ClassVar[tuple[str, ...]] = ()  # roles it only reads, when mapped (e.g. a bound)
    changes_architecture: ClassVar[bool] = False
    counter: ClassVar[str | None] = None  # history counter incremented when applied
    explanation: ClassVar[str] = ""  # one line for notifications and reports

    @classmethod
    def required(cls) -> tuple[str, ...]:
        """The roles it cannot do without."""
        return tuple(role for role in cls.changes if role not in cls.optional)

    @classmethod
    def roles(cls) -> tuple[str, ...]:
        """Every role it changes or reads."""
        return cls.changes + tuple(role for role in cls.reads if role not in cls.changes)

    @classmethod
    def keeps_weights(cls) -> bool:
        """True when the weights of an earlier attempt still fit and mean the same: such a
        strategy may warm-start from a checkpoint. A new initialisation would be overwritten
        by the checkpoint, so it counts as not keeping them."""
        return not cls.changes_architecture and "init" not in cls.changes

    @classmethod
    def missing_roles(cls, spec: RunSpec) -> list[str]:
        """The required roles the job does not let strategies change (none: it may apply)."""
        return [role for role in cls.required() if not spec.has_role(role)]

    @classmethod
    def understood_by(cls, spec: RunSpec) -> bool:
        """True when the job takes every role this strategy needs."""
        return not cls.missing_roles(spec)

    @classmethod
    def not_understood(cls, spec: RunSpec) -> str | None:
        """Why the job does not take this strategy, naming only the roles really missing;
        None when it does."""
        missing = cls.missing_roles(spec)
        mapped = spec.hyperparameter_roles
        unmapped = [role for role in missing if not spec.job.reads_fields and role not in mapped]
        if unmapped:
            return f"the script has no flag for {', '.join(unmapped)} (hyperparameter_roles)"
        if missing:
            return f"entry point does not take {', '.join(missing)} (hyperparameters_understood)"
        return None

    def applies(self, spec: RunSpec) -> bool:
        """True when this strategy can still change something in spec (its required roles
        are there: check understood_by first)."""
        raise NotImplementedError

    def apply(self, spec: RunSpec) -> RunSpec:
        """The spec for the next launch."""
        raise NotImplementedError

    def reason(self, before: RunSpec, after: RunSpec) -> str:
        shown = [
            (role, before.role_as_given(role), after.role_as_given(role)) for role in self.changes
        ]
        shown += [  # coupled flags that followed (a schedule's min_lr)
            (flag, before.script_hyperparameters[flag], after.script_hyperparameters.get(flag))
            for flag in before.coupled_flags
        ]
        changed = ", ".join(
            f"{label(before, role)} {old} -> {new}" for role, old, new in shown if old != new
        )
        return f"{self.explanation} ({changed})" if changed else self.explanation

    def bump_counter(self, state: State) -> State:
        if self.counter is None:
            return state
        history = state.history.model_copy(
            update={self.counter: getattr(state.history, self.counter) + 1}
        )
        return state.model_copy(update={"history": history})


def label(spec: RunSpec, role_or_flag: str) -> str:
    """A role as reason() shows it (its field or flag), or a coupled flag as its option."""
    if role_or_flag in spec.coupled_flags:
        return flag_label(role_or_flag)
    return spec.role_label(role_or_flag)


def register_strategy(cls: type[Strategy]) -> type[Strategy]:
    if cls.name in STRATEGIES:
        raise ValueError(f"strategy {cls.name!r} is registered twice")
    unknown = [role for role in (*cls.roles(), *cls.optional) if role not in ROLES]
    if unknown:
        raise ValueError(
            f"strategy {cls.name!r} declares unknown roles {unknown}; roles: {', '.join(ROLES)}"
        )
    if not set(cls.optional) <= set(cls.changes):
        raise ValueError(f"strategy {cls.name!r}: optional roles must be among its changes")
    STRATEGIES[cls.name] = cls
    return cls


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]()
    except KeyError:
        known = ", ".join(sorted(STRATEGIES))
        raise ValueError(f"unknown strategy {name!r}; known: {known}") from None
