"""Walk an ordered list of strategies with limits: the shared core of `adaptive` and
`config`. A rung is skipped, with the reason kept for the end message, when its strategy is
unknown, needs a role the job does not map, had no effect (its attempt repeated an earlier
one's curve and finding), was already used as often as allowed, or cannot change anything
any more."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from remedy.state_schema import Finding, PolicyStep, ResultKind, State
from remedy.strategies.base import STRATEGIES, Strategy


def times_used(state: State) -> Counter[str]:
    """Launches each strategy produced so far in this run (the failed ones included)."""
    return Counter(a.strategy for a in state.history.runs if a.strategy)


def without_effect(state: State) -> dict[str, str]:
    """Strategy -> the attempt it produced that repeated an earlier one (no effect)."""
    return {
        a.strategy: a.job_name
        for a in state.history.runs
        if a.strategy and a.result is not None and a.result.kind is ResultKind.no_effect
    }


@dataclass
class Walk:
    chosen: Strategy | None = None
    skipped: list[str] = field(default_factory=list)  # "name: why", in order


def build(cls: type[Strategy], findings: Sequence[Finding], state: State) -> Strategy:
    """A strategy that needs the findings (e.g. which samples to drop) offers for_findings;
    one that needs the stopped attempt too (where a spike began) offers for_state."""
    if callable(for_state := getattr(cls, "for_state", None)):
        return for_state(state, findings)
    for_findings = getattr(cls, "for_findings", None)
    return for_findings(findings) if callable(for_findings) else cls()


def walk(state: State, rungs: Sequence[PolicyStep], findings: Sequence[Finding] = ()) -> Walk:
    used = times_used(state)
    idle = without_effect(state)
    result = Walk()
    for rung in rungs:
        cls = STRATEGIES.get(rung.strategy)
        if cls is None:
            result.skipped.append(f"{rung.strategy}: not installed")
        elif why := cls.not_understood(state.run_spec):
            result.skipped.append(f"{rung.strategy}: {why}")
        elif rung.strategy in idle:
            result.skipped.append(f"{rung.strategy}: had no effect ({idle[rung.strategy]})")
        elif used[rung.strategy] >= rung.max_times:
            result.skipped.append(f"{rung.strategy}: tried {used[rung.strategy]}x, failed")
        elif not (strategy := build(cls, findings, state)).applies(state.run_spec):
            result.skipped.append(f"{rung.strategy}: nothing left to change")
        else:
            result.chosen = strategy
            return result
    return result


def cheap_first(rungs: Sequence[PolicyStep]) -> list[PolicyStep]:
    """Changes that keep the weights (and so may warm-start) before those that restart from
    scratch (an architecture change, a new init), otherwise in the given order. A new init
    counts as a restart: on the built-in chance case it ran first of the dead units' order
    as a cheap change, for a full launch from scratch, and left ReLU on LeCun's init for the
    rest of the run."""

    def restarts(rung: PolicyStep) -> bool:
        cls = STRATEGIES.get(rung.strategy)
        return bool(cls and not cls.keeps_weights())

    return sorted(rungs, key=restarts)  # stable: the given order within each group
