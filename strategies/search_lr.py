"""The learning rate as a bracket searched across attempts, not a value scaled and forgotten.

Every attempt that diverged closes the bracket from above at its rate (the rate its
schedule had reached, where it diverged on a warmup's ramp: Attempt.ramp_rate); every
attempt that stalled closes it from below. A probe that trained while its schedule was
still on its ramp has shown only half the rate it reached to hold (held_rate):
strategies/probes.py does not keep it, nor let it answer a question, above the highest
rate the run has seen held. The next rate lies strictly inside: the geometric middle
once both ends are known (unless they lie more than 100x apart), else a factor of 10 away
from the end that failed. A value at or beyond one that already failed in the same
direction is never proposed again. Up from a stall, the factors of 10 that the stalled
launch's own update ratio says would still move the weights less than a healthy run are
passed over (rungs_too_small; not by the finer steps from a run that learned).

`search_lr_down` (after a divergence) goes on cutting while each cut moved the failure
later (or, caught as early as the rule can, left the loss climbing half as far or less),
or while a bracket with both ends is still wider than BISECT_STOP; `search_lr_up`
(after a stall) goes on raising while the bracket allows. The policy's rung limits how
many launches either may spend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

from remedy.state_schema import Attempt, AttemptKind, Finding, ResultKind, RunSpec, State
from remedy.state_schema.update_ratio import HEALTHY_UPDATE_RATIO
from remedy.strategies.base import Strategy, register_strategy
from remedy.strategies.outcomes import learning_rate_of

STEP = 10.0  # away from a single failed end
BISECT_STOP = 1.5  # a bracket narrower than this (high / low) is settled: nothing to search
# A bracket wider than this (high / low, with a margin for rounding) is not bisected: a
# run that stalled at 1e-7 and diverged late at 0.01 says to cut 0.01, not to try 3e-5.
WIDE = STEP**2 * 1.01
FLOOR = 1e-7  # a rate below this does not train in any budget we would give it
ROUND = 4  # the most candidates a spread probes side by side (a plateau's, both ways)


@dataclass(frozen=True)
class Bracket:
    low: float | None = None  # the highest rate too low (it stalled, or learned too slowly)
    high: float | None = None  # the lowest rate too high (it diverged, or lower ones beat it)

    def inside(self, rate: float) -> bool:
        return (self.low is None or rate > self.low) and (self.high is None or rate < self.high)

    def describe(self) -> str:
        low = "-" if self.low is None else f"{self.low:g}"
        high = "-" if self.high is None else f"{self.high:g}"
        return f"too low at <= {low}, too high at >= {high}"


def tidy(rate: float) -> float:
    """The rate to 12 significant digits: 1e-06 x 10 is 1e-05, not 9.999999999999999e-06
    (flags and reasons show it as it is)."""
    return float(f"{rate:.12g}")


def learning_rate(attempt: Attempt) -> float | None:
    return learning_rate_of(attempt.spec)


def bracket(attempts: Sequence[Attempt]) -> Bracket:
    """The bracket the run's classified attempts have closed so far."""
    low: float | None = None
    high: float | None = None
    for attempt in attempts:
        rate = learning_rate(attempt)
        if rate is None or attempt.result is None:
            continue
        if attempt.result.kind is ResultKind.diverged:
            # on a warmup's ramp, the rate it ran at when it diverged is the one proved
            # too high: the schedule would take any typed rate above it past it
            failed = attempt.ramp_rate or rate  # a ramp's is under the typed rate
            high = failed if high is None else min(high, failed)
        elif attempt.result.kind is ResultKind.stalled:
            low = rate if low is None else max(low, rate)
    return Bracket(low, high)


HELD = (ResultKind.trained, ResultKind.outpaced, ResultKind.stalled, ResultKind.plateaued)


def held_rate(attempts: Sequence[Attempt]) -> float | None:
    """The highest rate a launch or probe of the run held without blowing up: its typed
    rate, or where it ended still on its schedule's ramp, half the rate the ramp had
    reached (a ramp from near zero passes half its last rate by the middle of the
    updates: the rate then held for half of them at least; a loss takes updates to blow
    up after its rate went too high). A probe of 25 updates of a 120-update warmup at
    0.248 reached 0.053: 0.027 held. A typed rate above it has not been seen to hold at
    the peak its schedule takes it to. A probe on its ramp that a lower rate's probe
    beside it out-learned (outlearned_on_its_ramp) shows nothing held: its rate was past
    what its model could take already."""
    rates = [
        rate if attempt.ramp_rate is None else attempt.ramp_rate / 2
        for attempt in attempts
        if attempt.result is not None
        and attempt.result.kind in HELD
        and (rate := learning_rate(attempt)) is not None
        and not outlearned_on_its_ramp(attempt, attempts)
    ]
    return max(rates, default=None)


def outlearned_on_its_ramp(probe: Attempt, attempts: Sequence[Attempt]) -> bool:
    """A probe that ended on its schedule's ramp and trained to a higher loss than a probe
    at a lower rate from the same start, over as many updates. On a ramp a rate that
    holds learns faster than a lower one (each update at a fraction of its rate); one
    that learns slower is past what its model takes. A fine-tuning script warming up
    over 120 updates, typed 2e-5: probes of 25 updates at 0.2 and 2 reached 0.041 and
    0.41, and 2 ended at loss 2.01 (its last losses spread 0.72) against 0.2's 1.95;
    held at half of 0.41, 0.2 went on as the run and diverged past its peak (update
    185)."""
    if probe.kind is not AttemptKind.probe or probe.ramp_rate is None:
        return False
    rate, loss = learning_rate(probe), trained_loss(probe)
    if rate is None or loss is None:
        return False
    for other in attempts:
        other_rate, other_loss = learning_rate(other), trained_loss(other)
        beside = (
            other is not probe
            and other.kind is AttemptKind.probe
            and other.start_step == probe.start_step
            and other.steps_run == probe.steps_run
        )
        if beside and other_rate is not None and other_loss is not None:
            if other_rate < rate and other_loss < loss:
                return True
    return False


def trained_loss(attempt: Attempt) -> float | None:
    """The loss an attempt that trained ended at (None: it did not train, or no loss)."""
    result = attempt.result
    return result.loss if result is not None and result.kind is ResultKind.trained else None


# A probe whose ramp reached this share of its typed rate or more ran near enough to its
# peak to be judged as any probe is: its peak at most twice what it ran at.
NEAR_ITS_PEAK = 0.5


def shown_to_hold(attempt: Attempt, held: float | None) -> bool:
    """The attempt's typed rate has been seen to hold: it did not end on its schedule's
    ramp, or its ramp reached NEAR_ITS_PEAK of it (a classifier warming up over 32
    updates, probed for 25: 1.04e-3 reached 8.1e-4, and lost to 3.3e-4, held at half of
    that, which went on and was asked again at its end: 795 updates for a final 320), or
    its rate is no higher than `held` (held_rate: the run's)."""
    rate = learning_rate(attempt)
    if attempt.ramp_rate is None or rate is None or held is None:
        return True
    return attempt.ramp_rate >= NEAR_ITS_PEAK * rate or at_or_under(rate, held)


def at_or_under(rate: float, held: float) -> bool:
    """`rate` is no higher than `held` (a held rate halved or tidied may differ in its last
    digits from the typed rate it stands for)."""
    return rate <= held * (1 + 1e-9)


def past_a_failed_run(runs: Sequence[Attempt], current: float, rate: float) -> bool:
    """`rate` lies beyond a rate at which a full launch of the run was found at fault
    (any finding), seen from `current`. The verdict's question asks whether a rate
    somewhat higher (or lower) than the run's does better; one past a launch that failed
    is no candidate, whatever its finding said of the rate (an Accelerate script's ReLUs
    died at 1.0, it was repaired at 0.1, and its question at the end probed 3.16)."""
    for run in runs:
        failed_at = learning_rate(run)
        if failed_at is None or not run.findings:
            continue
        if current < failed_at <= rate or rate <= failed_at < current:
            return True
    return False


def excess_loss(trace: Sequence[float | None], steps: int) -> float | None:
    """How far the median of the first `steps` losses after the first climbed above the
    first one (None: not enough finite losses; inf: a non-finite one among them)."""
    head = trace[:steps]
    if len(head) < 3 or head[0] is None:
        return None
    rest = [math.inf if x is None else x for x in head[1:]]
    return median(rest) - head[0]


def cut_helped(now: Attempt, before: Attempt) -> bool:
    """A cut made progress: the failure came later, or, caught as early as the rule can
    catch it, the loss climbed clearly less far (half the excess or less) over the same
    steps. Either way cutting further is worth a launch."""
    if now.result is None or now.result.kind is not ResultKind.diverged:
        return True
    if before.result is None or before.result.update is None or now.result.update is None:
        return True
    if now.result.update != before.result.update:
        return now.result.update > before.result.update
    steps = min(len(now.loss_trace), len(before.loss_trace), now.result.update)
    excess_now = excess_loss(now.loss_trace, steps)
    excess_before = excess_loss(before.loss_trace, steps)
    if excess_now is None or excess_before is None:
        return False
    return excess_now <= 0.5 * excess_before


def failure_moved_later(attempts: Sequence[Attempt], name: str) -> bool:
    """The last full launch `name` produced made progress over the launch before it (or
    it was not used yet): cutting further is still worth a launch."""
    runs = [a for a in attempts if a.kind is AttemptKind.run]
    for i in range(len(runs) - 1, 0, -1):
        if runs[i].strategy == name:
            return cut_helped(runs[i], runs[i - 1])
    return True


class SearchLR(Strategy):
    """Shared by both directions: the bracket comes from the run's attempts (for_state)."""

    changes = ("learning_rate", "warmup_learning_rate")
    optional = ("warmup_learning_rate",)
    counter = "num_learning_rate_adjustments"
    downward: bool

    def __init__(
        self,
        attempts: Sequence[Attempt] = (),
        reach: float = 1.0,
        downward: bool | None = None,
        fine: bool = False,
    ) -> None:
        self.attempts = list(attempts)
        self.bracket = bracket(self.attempts)
        # How far along: 1 = one STEP past the failed end (or the bracket's middle); a
        # probe tries several reaches side by side (spread()).
        self.reach = reach
        if downward is not None:
            self.downward = downward
        self.fine = fine  # a step of spread(fine=True): from a run that learned

    @classmethod
    def for_state(cls, state: State, findings: Sequence[Finding]) -> SearchLR:
        return cls(state.history.attempts)

    def next_rate(self, current: float) -> float | None:
        low, high = self.bracket.low, self.bracket.high
        if low is not None and high is not None:
            if high / low <= BISECT_STOP:
                return None  # settled: no rate in between worth a launch
            if high / low > WIDE:
                # the middle lies decades from both ends, where neither points: a step
                # from the end that failed, as from a single one
                rate = high / STEP**self.reach if self.downward else low * STEP**self.reach
            else:
                # reach 1: the geometric middle; 0.5 / 1.5: a quarter of the way from either
                towards = low if self.downward else high
                middle = math.sqrt(low * high)
                rate = middle * (towards / middle) ** (self.reach - 1)
        elif self.downward:
            rate = (high if high is not None else current) / STEP**self.reach
        else:
            base = low if low is not None else current
            rate = base * STEP ** (self.reach + self.passed_over(base))
        return tidy(rate) if self.bracket.inside(rate) and rate >= FLOOR else None

    def passed_over(self, base: float) -> int:
        """The STEPs this search up from `base` passes over (rungs_too_small); none for
        the finer steps from a run that learned."""
        return 0 if self.fine or self.downward else self.rungs_too_small(base)

    def rungs_too_small(self, base: float) -> int:
        """How many STEPs up from `base` would still move the weights less than a
        healthy run does (HEALTHY_UPDATE_RATIO), by the update ratio the latest launch at
        `base` measured (an update's size is in proportion to the rate): those rates are
        not tried. 0 where none was measured."""
        ratio = self.measured_ratio(base)
        if ratio is None or ratio >= HEALTHY_UPDATE_RATIO:
            return 0
        return max(0, math.ceil(math.log(HEALTHY_UPDATE_RATIO / ratio, STEP) - 1e-9) - 1)

    def measured_ratio(self, rate: float) -> float | None:
        """The update ratio the latest launch at `rate` measured (None: none did)."""
        measured = [
            a.update_ratio
            for a in self.attempts
            if a.update_ratio and (at := learning_rate(a)) and math.isclose(at, rate)
        ]
        return measured[-1] if measured else None

    def spread(self, spec: RunSpec, fine: bool = False) -> list[SearchLR]:
        """Candidates to probe side by side, this one first: one, two and three STEPs past
        the failed end, or a quarter, half and three quarters across a closed bracket
        (3.2x, 10x and 32x from the failed end of one wider than WIDE).
        `fine`: half, one and one and a half STEPs (3.2x, 10x, 32x) where the rate is near
        right already (a run that learned, in a line)."""
        closed = self.bracket.low and self.bracket.high
        reaches = (1.0, 0.5, 1.5) if closed or fine else (1.0, 2.0, 3.0)
        steps = [type(self)(self.attempts, r, self.downward, fine) for r in reaches]
        return self.viable(steps, spec)

    def viable(self, candidates: Sequence[SearchLR], spec: RunSpec) -> list[SearchLR]:
        """The candidates with a rate inside the bracket that no full launch has run yet
        (a probe's few updates say which rate learns fastest, not where a long run ends:
        a char transformer's probes favoured 10x its rate, which plateaued at step 300)."""
        current = float(spec.role("learning_rate"))
        runs = [a for a in self.attempts if a.kind is AttemptKind.run]
        tried = [rate for a in runs if (rate := learning_rate(a)) is not None]
        kept = []
        for candidate in candidates:
            rate = candidate.next_rate(current)
            if rate is None or any(math.isclose(rate, t, rel_tol=1e-6) for t in tried):
                continue
            if candidate.fine and past_a_failed_run(runs, current, rate):
                continue
            kept.append(candidate)
        return kept

    def applies(self, spec: RunSpec) -> bool:
        if not self.downward or self.bracket.low is not None:
            progressing = True  # a bracket with both ends narrows by itself
        else:
            progressing = failure_moved_later(self.attempts, self.name)
        return progressing and self.next_rate(float(spec.role("learning_rate"))) is not None

    def apply(self, spec: RunSpec) -> RunSpec:
        current = float(spec.role("learning_rate"))
        rate = self.next_rate(current)
        assert rate is not None, "apply() after applies() said no"
        update: dict[str, float] = {"learning_rate": rate}
        if spec.has_role("warmup_learning_rate"):
            # The schedule keeps its shape: the warmup rate moves by the same factor.
            warmup = spec.role("warmup_learning_rate")
            update["warmup_learning_rate"] = tidy(warmup * rate / current)
        return spec.with_roles(update)

    def reason(self, before: RunSpec, after: RunSpec) -> str:
        said = f"{super().reason(before, after)}; so far {self.bracket.describe()}"
        if self.fine:  # the verdict's question: its end at the held run's rate is asked
            end = "too high" if self.downward else "too low"
            asked = float(before.role("learning_rate"))
            said += f" ({asked:g} {end} only if a probe answers the question asked of it)"
        low = self.bracket.low
        base = low if low is not None else float(before.role("learning_rate"))
        skipped = self.passed_over(base)
        if skipped and not (low is not None and self.bracket.high is not None):
            ratio = self.measured_ratio(base)
            assert ratio is not None  # rungs_too_small found it
            top = tidy(base * STEP**skipped)
            said += (
                f"; {top:g} and below passed over: at {base:g} an update moved the weights "
                f"{ratio:.2g} of themselves, {ratio * STEP**skipped:.2g} at {top:g}, under "
                f"a healthy run's {HEALTHY_UPDATE_RATIO:g}"
            )
        return said


@register_strategy
class SearchLRDown(SearchLR):
    """Lower the learning rate inside the bracket: 10x below the lowest rate that
    diverged, or the geometric middle once a rate has stalled."""

    name = "search_lr_down"
    explanation = "Lower the learning rate below every rate found too high"
    downward = True


@register_strategy
class SearchLRUp(SearchLR):
    """Raise the learning rate inside the bracket: 10x above the highest rate that
    stalled, or the geometric middle once a rate has diverged."""

    name = "search_lr_up"
    explanation = "Raise the learning rate above every rate found too low"
    downward = False


@register_strategy
class SearchLRPlateau(SearchLR):
    """A plateau says the rate is wrong, not which way: a noise floor at a rate too high
    looks as flat as a crawl at a rate too low. Without probes it lowers the rate 10x
    (TinyUpdates, not a plateau, is what a rate too small shows); probed, it tries both
    ways (10x down, 10x up, 100x down, 100x up) and the loss decides; only up where the
    launch's updates were smaller than a healthy run's (too_small_to_lower). It closes no
    end of the bracket, and stays inside the one the run has."""

    name = "search_lr_plateau"
    explanation = "Move the learning rate off a plateau"
    downward = True

    def passed_over(self, base: float) -> int:
        return 0  # 10x and 100x either way, whatever the updates measured

    def next_rate(self, current: float) -> float | None:
        # From where the plateau is, not from a failed end: it failed in no direction.
        factor = STEP**self.reach
        rate = current / factor if self.downward else current * factor
        return tidy(rate) if self.bracket.inside(rate) and rate >= FLOOR else None

    @classmethod
    def for_state(cls, state: State, findings: Sequence[Finding]) -> SearchLR:
        """The first way off the plateau that is still open (10x down, 10x up, 100x down,
        100x up)."""
        options = cls(state.history.attempts).spread(state.run_spec)
        return options[0] if options else cls(state.history.attempts)

    def applies(self, spec: RunSpec) -> bool:
        return bool(self.viable([self], spec))

    def spread(self, spec: RunSpec, fine: bool = False) -> list[SearchLR]:
        both = [  # both ways, 10x and 100x: a model that learned nothing may be far off
            SearchLRPlateau(self.attempts, 1.0, downward=True),
            SearchLRPlateau(self.attempts, 1.0, downward=False),
            SearchLRPlateau(self.attempts, 2.0, downward=True),
            SearchLRPlateau(self.attempts, 2.0, downward=False),
        ]
        if self.too_small_to_lower(float(spec.role("learning_rate"))) is not None:
            both = [step for step in both if not step.downward]
        return self.viable(both, spec)

    def too_small_to_lower(self, current: float) -> float | None:
        """The update ratio a launch at `current` measured where it is under a healthy
        run's (HEALTHY_UPDATE_RATIO): a rate too high sits on a noise floor with large
        updates (a GPT-style job at 100x its rate 0.032), so the plateau looks only up.
        A spirals classifier at 1/30 of its rate moved its weights 9.3e-4, a fine-tuning
        script at 1/30 1.8e-4; probes down cost them two of their five and four. None
        where none was measured or it is not under."""
        ratio = self.measured_ratio(current)
        return ratio if ratio is not None and ratio < HEALTHY_UPDATE_RATIO else None

    def reason(self, before: RunSpec, after: RunSpec) -> str:
        said = super().reason(before, after)
        current = float(before.role("learning_rate"))
        if not self.downward and (ratio := self.too_small_to_lower(current)) is not None:
            said += (
                f"; not lowered: at {current:g} an update moved the weights {ratio:.2g} of "
                f"themselves, under a healthy run's {HEALTHY_UPDATE_RATIO:g}"
            )
        return said
