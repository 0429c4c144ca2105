"""What an attempt taught the policy: its finding's kind of trouble, and its outcome
classified (diverged at update s, stalled, trained to loss L, no effect).

Findings are repaired by the rule's class, never by the name a user gave the rule:
`{"name": "Spike", "rule": "LossSpike"}` is a spike. TROUBLE is the one table from a rule
class to the kind of trouble it detects; policies key their orders by that kind.

Pure: the plan task reads the attempt's step records from its backend and passes them in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from statistics import median
from typing import Any

from remedy.state_schema import (
    LEARNING_TOO_SLOWLY,
    NOT_TRAINED,
    SETTLED_EARLY,
    STILL_DESCENDING,
    Attempt,
    AttemptResult,
    Finding,
    JobStatus,
    ResultKind,
    RunSpec,
)
from remedy.state_schema.gradient_agreement import AGREEMENT_FIELDS, last_third_agreement
from remedy.state_schema.loss_windows import loss_thirds, rate_thirds, rising_share
from remedy.state_schema.update_ratio import UPDATE_RATIO_FIELD, launch_update_ratio
from remedy.strategies.warm_start import update_of


class Trouble(StrEnum):
    """What a finding says is wrong, whichever rule found it."""

    divergence = "divergence"  # the loss or the gradients blow up: the rate is too high
    spike = "spike"  # a sudden spike after a sound stretch (a bad batch, or the rate)
    stall = "stall"  # the model does not learn: updates far too small
    plateau = "plateau"  # the loss stopped falling (too low a rate, or a noise floor)
    noise_floor = "noise_floor"  # it levelled off early, lower rates beat it: too high a rate
    vanishing = "vanishing"  # gradients vanish in the lower layers
    dead_units = "dead_units"  # ReLUs that never fire again
    oscillation = "oscillation"
    overfit = "overfit"
    poor_init = "poor_init"
    unknown = "unknown"  # a rule of the user's that names no trouble we know


# Rule class -> the trouble it detects. A rule without a training pathology of its own
# (input checks, class balance, confusion) is left out: its findings get the divergence
# repairs, the most common pathology (unknown below), and the test of this table lists them.
TROUBLE: dict[str, Trouble] = {
    "ExplodingTensor": Trouble.divergence,
    "NonFiniteGradient": Trouble.divergence,  # the job's own NaN guard
    "DivergingLoss": Trouble.divergence,
    "WeightUpdateRatio": Trouble.divergence,
    "LossSpike": Trouble.spike,
    "GradientNormSpike": Trouble.spike,
    "TinyUpdates": Trouble.stall,
    "UnchangedTensor": Trouble.stall,
    "LossPlateau": Trouble.plateau,
    "LossNotDecreasing": Trouble.plateau,
    "StalledTraining": Trouble.plateau,
    "SlowConvergence": Trouble.plateau,
    # The verdict's own finding: the run completed, no rule fired, its model learned
    # nothing. A rate far too small crawls, one far too high sits on a noise floor.
    NOT_TRAINED: Trouble.plateau,
    # The verdict's other finding: still speeding up at its end, the rate held it back.
    LEARNING_TOO_SLOWLY: Trouble.stall,
    # Its open question, still descending in a line at its end: asked as a stall (probes
    # at higher rates), and withdrawn when none of them learns faster (still_descending.settle).
    STILL_DESCENDING: Trouble.stall,
    # Its other question, levelled off early: asked as a rate too high (probes at lower
    # rates), and withdrawn when none of them reaches its loss (still_descending.settle).
    SETTLED_EARLY: Trouble.noise_floor,
    "VanishingGradient": Trouble.vanishing,
    "SaturatedActivation": Trouble.vanishing,
    "DeadRelu": Trouble.dead_units,
    "DyingRelu": Trouble.dead_units,
    "OscillatingLoss": Trouble.oscillation,
    "Overfit": Trouble.overfit,
    "Overtraining": Trouble.overfit,
    "PoorWeightInitialization": Trouble.poor_init,
    # AUTOTRAINER's ratio of first- to last-layer gradients fires both ways (vanishing and
    # exploding); its message says which, its finding carries no direction.
    "GradientRatio": Trouble.unknown,
}
# A rate this much above a launch's first (or below the typed one) is a ramp, not rounding.
RAMP_RISE = 1.05
LOSS_TRACE_STEPS = 64  # first losses kept per attempt: enough to tell two curves apart
SAME_CURVE_RTOL = 1e-6  # bitwise-reproducible runs agree far closer; other ones far less


def rule_class(finding: Finding, spec: RunSpec | None = None) -> str:
    """The finding's rule class: recorded with it, else looked up in the spec's rules by
    the configuration's name (payloads written before the class was recorded), else the
    name itself (the built-in rule names are their classes)."""
    if finding.rule_class:
        return finding.rule_class
    for rule in spec.rules if spec else []:
        if rule.name == finding.rule and rule.rule:
            return rule.rule
    return finding.rule


def trouble(finding: Finding, spec: RunSpec | None = None) -> Trouble:
    return TROUBLE.get(rule_class(finding, spec), Trouble.unknown)


def first_finding(attempt: Attempt) -> Finding | None:
    """The finding that began earliest (one without a step counts as late)."""
    return min(attempt.findings, key=lambda f: math.inf if f.step is None else f.step, default=None)


def onset_update(attempt: Attempt, finding: Finding | None) -> int | None:
    """The update, counted over the whole run, where the finding began."""
    if finding is None or finding.step is None:
        return None
    return update_of(finding.step, attempt.start_step, attempt.spec.skip_steps)


# ---------------------------------------------------------------------------------------
# what the job's step records say


def step_losses(records: Iterable[Mapping[str, Any]]) -> list[float | None]:
    """The training loss of each step record, in order (None where non-finite)."""
    return step_figures(records, "loss")


def step_rates(records: Iterable[Mapping[str, Any]]) -> list[float | None]:
    """The learning rate of each step record, in order (None where not recorded: a script
    without a torch optimizer, or a non-finite value)."""
    return step_figures(records, "learning_rate")


def descent_figures(
    records: Sequence[Mapping[str, Any]], typed: float | None = None
) -> dict[str, Any]:
    """What a launch's step records say of its descent, as Attempt fields: loss_thirds,
    rate_thirds, gradient_agreement, loss_rises and update_ratio (at `typed`, the rate it
    was given: launch_update_ratio); the verdict reads them."""
    losses = step_losses(records)
    rates = step_rates(records)
    agreement = [step_figures(records, field) for field in AGREEMENT_FIELDS.values()]
    return {
        "loss_thirds": loss_thirds(losses),
        "rate_thirds": rate_thirds(rates),
        "gradient_agreement": last_third_agreement(agreement),
        "loss_rises": rising_share(losses),
        "update_ratio": launch_update_ratio(
            step_figures(records, UPDATE_RATIO_FIELD), rates, typed
        ),
    }


def step_figures(records: Iterable[Mapping[str, Any]], key: str) -> list[float | None]:
    """One figure of each step record, in order (None where absent or non-finite)."""
    figures: list[float | None] = []
    for record in records:
        if record.get("type") == "step":
            value = record.get(key)
            finite = isinstance(value, int | float) and math.isfinite(value)
            figures.append(float(value) if finite else None)  # type: ignore[arg-type]
    return figures


def grad_norm_before(records: Sequence[Mapping[str, Any]], onset_index: int | None) -> float | None:
    """Median total gradient norm of the step records before the onset (index into the
    launch's step records; None: all of them), finite values only."""
    steps = [r for r in records if r.get("type") == "step"]
    if onset_index is not None:
        steps = steps[:onset_index]
    norms = [
        float(r["grad_norm"])
        for r in steps
        if isinstance(r.get("grad_norm"), int | float) and math.isfinite(r["grad_norm"])
    ]
    return median(norms) if norms else None


def digest(attempt: Attempt, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The Attempt fields the policy reads, from the job's step records: the first losses,
    the typical gradient norm before the finding, and the rate a schedule's ramp had
    reached there (or at its end)."""
    finding = first_finding(attempt)
    onset = finding.step if finding is not None else None  # hook step = index in the launch
    steps = [r for r in records if r.get("type") == "step"]
    before = steps[:onset]
    typed = learning_rate_of(attempt.spec)
    up_to_onset = steps if onset is None else steps[: onset + 1]
    return {
        "loss_trace": step_losses(records)[:LOSS_TRACE_STEPS],
        "grad_norm_median": grad_norm_before(records, onset),
        "ramp_rate": rate_on_its_ramp(step_rates(up_to_onset), typed),
        "update_ratio": launch_update_ratio(
            step_figures(before, UPDATE_RATIO_FIELD), step_rates(before), typed
        ),
    }


def rate_on_its_ramp(rates: Sequence[float | None], typed: float | None) -> float | None:
    """The highest rate a launch's optimizer ran at over `rates` (its steps up to its
    finding, or its end) where its schedule was still taking it up towards the rate it was
    given (`typed`: a warmup's ramp, OneCycle's first phase). A divergence there proves
    that rate too high, not the typed one it never reached; a probe that trained there
    has shown only that rate to hold (one that trained for 25 updates of a 120-update
    warmup went on as the run and diverged at update 105). None: nothing typed or
    recorded, or no ramp (a flat rate, one that reached the typed, a decay).
    A script's schedule is taken to peak at the rate it was given, as
    state_schema/update_ratio.py takes it."""
    known = [rate for rate in rates if rate is not None and rate > 0]
    if typed is None or not known:
        return None
    highest = max(known)
    if highest >= typed / RAMP_RISE or highest < known[0] * RAMP_RISE:
        return None
    return float(f"{highest:.3g}")  # a measured rate: its next candidates read 0.413, not 0.4132231


def learning_rate_of(spec: RunSpec) -> float | None:
    """The rate a launch was given (its learning_rate role), where it has one."""
    if not spec.has_role("learning_rate"):
        return None
    value = spec.role("learning_rate")
    return float(value) if isinstance(value, int | float) and value > 0 else None


# ---------------------------------------------------------------------------------------
# classifying an attempt


def same_curve(a: Sequence[float | None], b: Sequence[float | None]) -> bool:
    """Two loss traces that agree on every step both have (at least 3 of them)."""
    n = min(len(a), len(b))
    if n < 3:
        return False
    for x, y in zip(a[:n], b[:n], strict=True):
        if (x is None) != (y is None):
            return False
        if x is not None and y is not None and not math.isclose(x, y, rel_tol=SAME_CURVE_RTOL):
            return False
    return True


def repeats(attempt: Attempt, earlier: Attempt) -> bool:
    """The attempt reproduced an earlier one: the same start, the same curve and the same
    finding at the same update. Whatever changed between them had no effect."""
    mine, theirs = first_finding(attempt), first_finding(earlier)
    if mine is None or theirs is None or attempt.start_step != earlier.start_step:
        return False
    return (
        rule_class(mine, attempt.spec) == rule_class(theirs, earlier.spec)
        and onset_update(attempt, mine) == onset_update(earlier, theirs)
        and same_curve(attempt.loss_trace, earlier.loss_trace)
    )


def classify(attempt: Attempt, earlier: Sequence[Attempt] = ()) -> AttemptResult:
    """The attempt's outcome, from its findings, its job's end and its losses."""
    found = first_finding(attempt)
    if found is not None:
        update = onset_update(attempt, found)
        at = f" at update {update}" if update is not None else ""
        name = rule_class(found, attempt.spec)
        for other in reversed(earlier):
            if repeats(attempt, other):
                return AttemptResult(
                    kind=ResultKind.no_effect,
                    update=update,
                    summary=f"no effect: the same curve and {name}{at} as {other.job_name}",
                )
        # What the trouble says about the rate in effect: a divergence, a spike or a noise
        # floor that lower rates beat, too high; a stall, too low. A plateau says neither:
        # an Adam run at 100x its rate sits on a noise floor as flat as a run at a rate far
        # too small (a tiny GPT at 0.6: loss 5.71 -> 5.44 in 300 steps, at 6e-3: -> 3.07),
        # so it closes no end of the bracket and probes look both ways.
        kind = trouble(found, attempt.spec)
        if kind in (Trouble.divergence, Trouble.spike):
            ramp = ""
            if attempt.ramp_rate is not None:
                ramp = f", on its schedule's ramp at a rate of {attempt.ramp_rate:.3g}"
            why = f"diverged{at} ({name}){ramp}"
            return AttemptResult(kind=ResultKind.diverged, update=update, summary=why)
        if kind is Trouble.noise_floor:  # no blow-up, but the rate was too high all the same
            why = f"its rate too high: lower rates beat it ({name}{at})"
            return AttemptResult(kind=ResultKind.diverged, update=update, summary=why)
        if kind is Trouble.stall:
            return AttemptResult(
                kind=ResultKind.stalled, update=update, summary=f"stalled{at} ({name})"
            )
        if kind is Trouble.plateau:
            return AttemptResult(
                kind=ResultKind.plateaued, update=update, summary=f"plateaued{at} ({name})"
            )
        return AttemptResult(kind=ResultKind.flawed, update=update, summary=f"{name}{at}")
    if attempt.outcome in (JobStatus.Failed, JobStatus.Stopped):
        why = attempt.failure_reason or attempt.outcome.value.lower()
        return AttemptResult(kind=ResultKind.failed, summary=f"job {why}")
    if attempt.outcome is JobStatus.Completed:
        loss = attempt.metrics.get("train:loss", attempt.final_loss)
        if loss is not None and math.isfinite(loss):
            return AttemptResult(
                kind=ResultKind.trained, loss=loss, summary=f"ran to its end, loss {loss:.4g}"
            )
    return AttemptResult(kind=ResultKind.unknown, summary="no loss to judge")
