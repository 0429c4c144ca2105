"""A model that learned nothing at rates a decade apart: the rate is not what is wrong.

A plateau's order searches the rate first, which is right when one rate was tried. Once
full launches of the run plateaued at rates RULED_OUT_SPAN or more apart, more rates in
between tell little: the model itself does not learn. The built-in ReLU ResNet without
batch norm (benchmarks/repair_quality.py, the chance case at seed 2) plateaued at 0.01,
0.001, 0.0316, 0.00316 and 0.000316 (test accuracy 0.105-0.141, chance is 0.1) and spent
its eight launches there, batch norm never tried. The model's changes then come first
(adaptive.RATE_RULED_OUT), and at the highest rate that plateaued rather than the last
one the search reached: those rates did no better, and a normalised model takes a higher
rate than the one that was searched to.
"""

from __future__ import annotations

from remedy.state_schema import Attempt, ResultKind, State
from remedy.strategies.made_worse import RATE_ROLES, Undo
from remedy.strategies.search_lr import learning_rate

RULED_OUT_SPAN = 10.0  # the plateaued rates' highest over their lowest


def plateaued(state: State) -> list[tuple[float, Attempt]]:
    """(rate, launch) for each full launch of the run that plateaued, in order."""
    found = []
    for attempt in state.history.runs:
        result, rate = attempt.result, learning_rate(attempt)
        if result and result.kind is ResultKind.plateaued and rate is not None:
            found.append((rate, attempt))
    return found


def spans_a_decade(found: list[tuple[float, Attempt]]) -> bool:
    rates = [rate for rate, _ in found]
    return len(rates) >= 2 and max(rates) / min(rates) >= RULED_OUT_SPAN


def rate_ruled_out(state: State) -> bool:
    return spans_a_decade(plateaued(state))


def back_to_highest_plateau(state: State) -> Undo | None:
    """The rate roles of the launch that plateaued at the highest rate, where the spec
    has moved off them (None when the rate is not ruled out, or is there already)."""
    found = plateaued(state)
    if not spans_a_decade(found):
        return None
    highest, launch = max(found, key=lambda pair: pair[0])
    lowest = min(rate for rate, _ in found)
    spec = state.run_spec
    roles = {
        role: launch.spec.role(role)
        for role in sorted(RATE_ROLES)
        if spec.has_role(role) and launch.spec.has_role(role)
        if spec.role(role) != launch.spec.role(role)
    }
    if not roles:
        return None
    back = ", ".join(
        f"{spec.role_label(r)} {spec.role_as_given(r)} -> {launch.spec.role_as_given(r)}"
        for r in roles
    )
    why = f"the rate ruled out (plateaued from {lowest:g} to {highest:g}): {back}"
    why += f", as in {launch.job_name}"
    return Undo(roles, why, keeps_weights=True)
