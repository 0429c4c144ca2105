"""Probes: candidate fixes tried briefly, side by side, before a full relaunch.

The plan puts candidates in state.probes (the rate's bracket: a few rates at once); each is
launched as an attempt of kind "probe" and stopped after Budgets.probe_steps updates (a
quarter of the job where its length is known: probe_length), or earlier by the same rules
that watch a full run. Here, pure: how a probe is judged, which
one is best, and what the run keeps of them. Successive halving on the run's own job: the
early loss ranks candidates well enough (Li et al. 2017), and a rate that diverged or
stalled in a probe closes the bracket as a full launch would.

A round of two probes or more, where the backend can hold them all, has a rung at half
their updates (tasks/probe.py, rung_of): each holds there, and one that took the loss down
less than LOST_SHARE as far as another did, whose drop stands clear of its noise, is
stopped there (`outpaced`: a rate so far behind at half rarely catches up in the other
half); the others go on to their bound.
An outpaced probe closes no end of the bracket (it neither stalled nor diverged), and is
kept only where no probe trained.

When the best probe of a round is its farthest rate (the highest of a search upwards, the
lowest of one downwards), another probe learned slower (stalled, outpaced, or trained to a
higher loss: a trend, where a probe that diverged is none) and the bracket is open past it, the
rate that learns best may lie beyond the round's range: up to FARTHER_ROUNDS more rounds of one
probe each go one STEP past the best so far (the bracketing phase of a line search, one step
at a time: a step that learns slower ends it at the cost of one probe) before the best of
all is kept.

When a search upwards (from a stall) finds its best probe a decade below a rate that was
outpaced at the rung (it neither diverged nor stalled: far behind, yet stable), the rate
that learns best may lie inside that decade: one more probe at its geometric middle
(between) decides before the run commits. A decade is coarse there: a word LM that stalled
at 0.67 probed 6.7 (best), 67 (outpaced) and 670 (diverged); 6.7 trained as the run, was
found still descending at its end and relaunched at 21 (the intended rate is 20).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import fmean, pstdev

from remedy.state_schema import (
    Attempt,
    AttemptKind,
    AttemptResult,
    JobStatus,
    PlannedChange,
    ProbeCandidate,
    ResultKind,
    RunSpec,
    State,
)
from remedy.state_schema.transitions import spec_changes
from remedy.strategies.base import get_strategy
from remedy.strategies.outcomes import classify, learning_rate_of
from remedy.strategies.search_lr import (
    ROUND,
    STEP,
    SearchLR,
    SearchLRDown,
    SearchLRPlateau,
    SearchLRUp,
    at_or_under,
    held_rate,
    learning_rate,
    shown_to_hold,
)

LAST_LOSSES = 5  # a probe's loss: the mean of its last few, not one batch
JOB_FRACTION = 4  # a probe runs at most a quarter of the job's own length, where known
MIN_PROBE_STEPS = 10  # fewer would rank rates by noise; a divergence takes about ten to show
FARTHER_ROUNDS = 3  # one-probe rounds past the first while the best is the farthest rate
# At the rung, a probe whose loss fell less than this share of another's drop is outpaced:
# on the benchmark's rounds every probe that ended best was at 0.46 of the rung's leader or
# above (a VAE's rate 10x under a leader that diverged later), the slowest at 0.39 or below.
LOST_SHARE = 0.25
CLEAR_OF_NOISE = 2.0  # a leader's drop: at least this many times its last losses' spread
# The most probes one plan may hold at their bound at once: a first round's, then one a
# round further.
MOST_HELD = ROUND + FARTHER_ROUNDS


def probe_length(state: State) -> int:
    """Updates each probe runs: Budgets.probe_steps, or a quarter of the job's own length
    where a full launch ran to its end or the run states it (RunSpec.known_length: a
    probe nearly as long as the job costs more than it tells: 50-update probes against a
    job of 90), never under MIN_PROBE_STEPS unless the budget is."""
    budget = state.budgets.probe_steps
    lengths = [
        run.start_step + run.steps_run
        for run in state.history.runs
        if run.outcome is JobStatus.Completed and run.steps_run
    ]
    if (stated := state.run_spec.known_length()) is not None:
        lengths.append(stated)
    if not lengths:
        return budget
    return min(budget, max(MIN_PROBE_STEPS, max(lengths) // JOB_FRACTION))


def window_loss(trace: Sequence[float | None], last: int = LAST_LOSSES) -> float | None:
    """Mean of the last `last` losses (None: none, or a non-finite one among them)."""
    tail = list(trace[-last:])
    if not tail or any(x is None for x in tail):
        return None
    values = [x for x in tail if x is not None]
    return fmean(values)


def judge(probe: Attempt) -> AttemptResult:
    """A probe's outcome: a finding classifies it as a full attempt's would; one stopped
    at its bound (or done) without a finding trained to its final_loss, the mean of its
    last losses (not of loss_trace, which keeps only the first ones)."""
    if probe.findings:
        return classify(probe)
    bounded = probe.held or probe.outcome in (JobStatus.Stopped, JobStatus.Completed)
    loss = probe.final_loss  # the mean of its last losses (tasks/probe.py: window_loss)
    if bounded and loss is not None and math.isfinite(loss):
        ramp = ""
        if probe.ramp_rate is not None:
            ramp = f", still on its schedule's ramp (at {probe.ramp_rate:.3g})"
        return AttemptResult(
            kind=ResultKind.trained,
            loss=loss,
            summary=f"loss {loss:.4g} after {probe.steps_run} updates{ramp}",
        )
    why = probe.failure_reason or (probe.outcome.value if probe.outcome else "no loss")
    return AttemptResult(kind=ResultKind.failed, summary=f"probe ended: {why}")


def window_spread(trace: Sequence[float | None], last: int = LAST_LOSSES) -> float | None:
    """Standard deviation of the losses window_loss averages (None where it has no mean)."""
    if window_loss(trace, last) is None:
        return None
    return pstdev([x for x in trace[-last:] if x is not None])


def best(probes: Sequence[Attempt], held: float | None = None) -> Attempt | None:
    """The probe that trained to the lowest loss (the first of equals), or a higher rate of
    the same search that trained as low within the noise (level_and_faster); if none
    trained, the least outpaced one (its leader went on and failed after the rung). One
    that ended still on its schedule's ramp, at a rate above `held` (the run's held_rate),
    gives way to the highest rate of the others at or under it (on_its_ramp)."""
    for kind in (ResultKind.trained, ResultKind.outpaced):
        ranked = [p for p in probes if p.result and p.result.kind is kind]
        if ranked:
            lowest = min(ranked, key=lambda p: loss_of(p.result))
            chosen = level_and_faster(lowest, ranked) if kind is ResultKind.trained else lowest
            return on_its_ramp(chosen, probes, held)
    return None


def on_its_ramp(chosen: Attempt, probes: Sequence[Attempt], held: float | None) -> Attempt:
    """The chosen probe, unless it ended on its schedule's ramp at a typed rate above any
    the run has seen hold (shown_to_hold): then the highest rate of the probes that trained
    or were outpaced at or under that (None of them: the chosen). On a ramp every probe
    runs at a fraction of its rate, where a higher one always learns faster; its peak
    comes later. A fine-tuning script warming up over 120 updates chose 0.248 after 25,
    which diverged at its peak as the run (update 129); 0.0248 trained to the intended
    run's accuracy. A OneCycle script chose 0.146 (val accuracy 0.931, against 0.954 at
    0.0146, which it had outpaced at the rung)."""
    if held is None or shown_to_hold(chosen, held):
        return chosen
    under = held_probes(probes, held)
    return max(under, key=lambda pair: pair[0])[1] if under else chosen


def held_probes(probes: Sequence[Attempt], held: float) -> list[tuple[float, Attempt]]:
    """(rate, probe) of the probes that trained or were outpaced at a rate at or under
    `held` (the run's held_rate): rates seen to hold, one of which on_its_ramp keeps."""
    kinds = (ResultKind.trained, ResultKind.outpaced)
    return [
        (rate, p)
        for p in probes
        if p.result
        and p.result.kind in kinds
        and (rate := learning_rate(p)) is not None
        and at_or_under(rate, held)
    ]


# The searches whose probes lie on one side of the run's rate, in one direction: a
# plateau's look both ways, from a rate that may sit on a noise floor too high already.
ONE_WAY = (SearchLRUp.name, SearchLRDown.name)


def level_and_faster(lowest: Attempt, trained: Sequence[Attempt]) -> Attempt:
    """Of a search one way (up from a stall, down from a divergence), the highest rate
    whose probe trained as low as the lowest within the noise of the two means
    (CLEAR_OF_NOISE standard errors); else the lowest. A short probe favours the smaller
    of two stable rates (short-horizon bias, Wu et al. 2018): a spirals classifier on Adam
    probed 0.001 to 1.002 and 0.01 to 1.051 in 25 updates, batch noise about 0.05 (from a
    stall at 1/1000 of its rate, and from a divergence at 100x); 0.001's run was found
    learning too slowly at its end, 0.01 is its intended rate. A rate that trained through
    its probe may still diverge later in the run; its finding then closes the bracket."""
    if lowest.strategy not in ONE_WAY:
        return lowest
    level = [
        p
        for p in trained
        if p.strategy == lowest.strategy and above(p, lowest) and level_with(p, lowest)
    ]
    return max(level, key=lambda p: learning_rate(p) or 0.0) if level else lowest


def level_with(probe: Attempt, lowest: Attempt) -> bool:
    """The probe's loss is above the lowest's by no more than the noise of the two means."""
    spreads = (probe.final_loss_spread, lowest.final_loss_spread)
    if spreads[0] is None or spreads[1] is None:
        return False
    error = math.sqrt((spreads[0] ** 2 + spreads[1] ** 2) / LAST_LOSSES)
    return loss_of(probe.result) - loss_of(lowest.result) <= CLEAR_OF_NOISE * error


def outpaced(
    probes: Sequence[Attempt], traces: Mapping[str, Sequence[float | None]]
) -> dict[str, AttemptResult]:
    """At the rung: the probes (by job name; `traces`: their step losses up to the rung,
    all from the same start) another outpaced, each with its result. A leader's drop (its
    first loss less the mean of its last LAST_LOSSES) stands CLEAR_OF_NOISE times their
    spread; a probe whose drop is under LOST_SHARE of the largest such drop is outpaced.
    One at a higher rate than the leader's whose loss climbed as clearly above its first
    diverged (a rule would say so a few updates later: it closes the bracket as one)."""
    by_name = {p.job_name: p for p in probes}
    drops: dict[str, float] = {}
    spreads: dict[str, float] = {}
    for name, trace in traces.items():
        loss = window_loss(trace)
        if not trace or trace[0] is None or loss is None:
            continue
        drops[name] = trace[0] - loss
        spreads[name] = window_spread(trace) or 0.0
    leaders = {n: d for n, d in drops.items() if d > 0 and d > CLEAR_OF_NOISE * spreads[n]}
    if not leaders:
        return {}
    leader = max(leaders, key=lambda name: leaders[name])
    lead = leaders[leader]
    called = called_by_change(by_name[leader]) if leader in by_name else leader
    lost: dict[str, AttemptResult] = {}
    for name, drop in drops.items():
        if name == leader or drop >= LOST_SHARE * lead:
            continue
        updates, loss = len(traces[name]), window_loss(traces[name])
        probe = by_name.get(name)
        if probe and -drop > CLEAR_OF_NOISE * spreads[name] and above(probe, by_name.get(leader)):
            start = probe.start_step
            lost[name] = AttemptResult(
                kind=ResultKind.diverged,
                update=start + updates,
                loss=loss,
                summary=f"diverged at update {start + updates} (its loss up {-drop:.3g} at "
                f"its rung, while {called}'s fell {lead:.3g}); stopped there",
            )
            continue
        moved = (
            f"loss down {drop:.3g}, under {LOST_SHARE:g} of"
            if drop >= 0
            else (
                f"loss up {-drop:.3g}, against"  # a lower rate whose first updates rose
            )
        )
        lost[name] = AttemptResult(
            kind=ResultKind.outpaced,
            loss=loss,
            summary=f"outpaced after {updates} updates: {moved} {called}'s fall of "
            f"{lead:.3g}; stopped there",
        )
    return lost


def above(probe: Attempt, leader: Attempt | None) -> bool:
    """The probe's learning rate is higher than the leader's (False where either is unknown)."""
    mine = learning_rate(probe)
    theirs = learning_rate(leader) if leader is not None else None
    return mine is not None and theirs is not None and mine > theirs


def loss_of(result: AttemptResult | None) -> float:
    """A result's loss for ranking; inf where it has none."""
    return result.loss if result is not None and result.loss is not None else math.inf


def probed_before(state: State, spec: RunSpec) -> Attempt | None:
    """An earlier probe of this very spec (its bound and its start included): its result
    stands, since running it again would only repeat it."""
    for attempt in state.history.attempts:
        if attempt.kind is AttemptKind.probe and attempt.spec == spec and attempt.result:
            return attempt
    return None


def past_a_slower_rate(spec: RunSpec, probed: Sequence[Attempt]) -> str | None:
    """Why a candidate is not worth a launch: of the probes that stand for this round
    (`probed`, run before), one lies between the candidate's rate and another's, and
    learned slower than that other (learned_slower): the trend says the candidate, farther
    along the same way, learns slower still (the word farther() reads the other way).
    None where nothing says so."""
    rate = learning_rate_of(spec)
    rated = [(r, a) for a in probed if (r := learning_rate(a)) is not None]
    if rate is None:
        return None
    for middle_rate, middle in rated:
        for near_rate, near in rated:
            between = rate < middle_rate < near_rate or rate > middle_rate > near_rate
            if between and learned_slower(middle, near):
                return (
                    f"{rate:g} lies past {middle_rate:g}, which learned slower than "
                    f"{near_rate:g} (probed before)"
                )
    return None


def probe_attempt(candidate: ProbeCandidate, job_name: str) -> Attempt:
    """The record of a probe at its launch."""
    return Attempt(
        job_name=job_name,
        spec=candidate.run_spec,
        kind=AttemptKind.probe,
        strategy=candidate.strategy,
        strategy_reason=candidate.reason,
        changes=candidate.changes,
    )


def summary(
    probes: Sequence[Attempt], chosen: Attempt | None, reused: Sequence[Attempt] = ()
) -> str:
    parts = []
    for probe in [*probes, *reused]:
        said = probe.result.summary if probe.result else "not judged"
        before = f" (probed before: {probe.job_name})" if probe in reused else ""
        mark = " (best)" if probe is chosen else ""
        if probe is chosen and probe.result and lowest_loss(probes, reused) < loss_of(probe.result):
            mark = " (best: as low within the noise, at a higher rate)"
            if any(above(p, chosen) and p.ramp_rate is not None for p in [*probes, *reused]):
                mark = " (best: the highest rate seen to hold; those above ran on their ramp)"
        parts.append(f"{called_by_change(probe)}: {said}{before}{mark}")
    return "probed " + ", ".join(parts)


def lowest_loss(probes: Sequence[Attempt], reused: Sequence[Attempt]) -> float:
    trained = [p for p in [*probes, *reused] if p.result and p.result.kind is ResultKind.trained]
    return min((loss_of(p.result) for p in trained), default=math.inf)


def called_by_change(probe: Attempt) -> str:
    """A probe named by what it changed (`lr 0.006`), else by its job."""
    return "; ".join(_changed(probe)) or probe.job_name


def _changed(probe: Attempt) -> list[str]:
    return [
        f"{key.removeprefix('hyperparameters.')} {after:g}"
        for key, (_, after) in probe.changes.items()
        if isinstance(after, int | float) and key not in ("start_epoch",)
    ]


def farther(state: State, probed: Sequence[Attempt]) -> list[ProbeCandidate]:
    """The next round of a rate search whose best probe so far (of `probed`: this plan's
    rounds, judged) is its farthest rate, with the bracket (the history's, the probes' in
    it) open past it: one STEP further that way, from the best probe's spec (its warm
    start kept). [] when the best probe lies inside the range probed, when
    no other probe learned slower than it (learned_slower), when it was kept as the
    highest rate seen to hold rather than as the fastest (on_its_ramp: those faster lie
    the other way), or nothing is left past it."""
    chosen = best(probed, held_rate(state.history.attempts))
    if chosen is not best(probed):
        return []  # kept below faster ones: nothing points past it
    if chosen is None or chosen.strategy is None:
        return []
    strategy = get_strategy(chosen.strategy)
    rate = learning_rate(chosen)
    spec = state.run_spec
    current = spec.role("learning_rate") if spec.has_role("learning_rate") else None
    if not isinstance(strategy, SearchLR) or rate is None or not isinstance(current, int | float):
        return []
    if math.isclose(rate, current):
        return []
    upward = rate > current
    rates = [r for probe in probed if (r := learning_rate(probe)) is not None]
    if not math.isclose(rate, max(rates) if upward else min(rates)):
        return []  # the best lies inside the range probed: nothing points further
    if not any(learned_slower(probe, chosen) for probe in probed):
        return []  # the others diverged: they show where rates stop being stable, no trend
    attempts = state.history.attempts
    step = SearchLRPlateau(attempts, 1.0, downward=not upward)
    search = type(strategy)(attempts)  # its words, with the run's bracket
    return moved_from(state, chosen, step, search, f"past the best probe so far ({rate:g})")


def between(state: State, probed: Sequence[Attempt]) -> list[ProbeCandidate]:
    """One probe at the geometric middle of the decade between the best probe of a search
    upwards (of `probed`: this plan's rounds, judged) and the next higher rate probed, where
    that rate was outpaced at the rung (stable but far behind: the best rate learns, and
    the decade above it may hold one that learns faster). [] otherwise: a search down, a
    gap already finer than a decade, a higher rate that diverged or trained (its loss at
    the bound says where it stands), or a middle a full launch ran."""
    chosen = best(probed, held_rate(state.history.attempts))
    if chosen is None or chosen.strategy is None or chosen.result is None:
        return []
    rate = learning_rate(chosen)
    up = isinstance(get_strategy(chosen.strategy), SearchLRUp)
    if not up or rate is None or chosen.result.kind is not ResultKind.trained:
        return []
    above_it = [(r, p) for p in probed if (r := learning_rate(p)) is not None and r > rate]
    if not above_it:
        return []
    next_rate, neighbour = min(above_it, key=lambda pair: pair[0])
    outpaced_there = neighbour.result is not None and neighbour.result.kind is ResultKind.outpaced
    if not outpaced_there or next_rate < rate * STEP / 1.01:
        return []
    attempts = state.history.attempts
    step = SearchLRPlateau(attempts, math.log(next_rate / rate, STEP) / 2, downward=False)
    why = f"between the best probe so far ({rate:g}) and {next_rate:g}, outpaced at its rung"
    return moved_from(state, chosen, step, SearchLRUp(attempts), why)


def moved_from(
    state: State, chosen: Attempt, step: SearchLRPlateau, search: SearchLR, why: str
) -> list[ProbeCandidate]:
    """The candidate of a further round: the chosen probe's spec (its warm start kept)
    with the rate `step` moves it to, in `search`'s words and `why`; [] where the rate is
    not viable (outside the bracket, or a full launch ran it)."""
    base = chosen.spec.model_copy(update={"max_updates": None})
    spec = state.run_spec
    candidates: list[ProbeCandidate] = []
    for viable in SearchLRPlateau(state.history.attempts).viable([step], base):
        after = viable.apply(base)
        candidates.append(
            ProbeCandidate(
                strategy=chosen.strategy,
                reason=f"{search.reason(spec, after)}; {why}",
                changes=spec_changes(spec, after),
                run_spec=after,
            )
        )
    return candidates


def learned_slower(probe: Attempt, chosen: Attempt) -> bool:
    """Whether `probe` learned slower than the chosen one: it stalled, was outpaced, or
    trained to a higher loss. A trend towards the chosen probe's rate that may go on past
    it; a probe that diverged is no such trend."""
    if probe is chosen or probe.result is None:
        return False
    if probe.result.kind in (ResultKind.stalled, ResultKind.outpaced):
        return True
    trained = probe.result.kind is ResultKind.trained
    return trained and loss_of(probe.result) > loss_of(chosen.result)


def with_probes(state: State, probes: Sequence[Attempt]) -> tuple[State, list[Attempt]]:
    """The run with its new probes in the history, judged (and those judged records)."""
    judged = [p if p.result else p.model_copy(update={"result": judge(p)}) for p in probes]
    history = state.history.model_copy(update={"attempts": [*state.history.attempts, *judged]})
    return state.model_copy(update={"history": history, "probes": []}), judged


def keep_probes(state: State, probes: Sequence[Attempt], reused: Sequence[Attempt] = ()) -> State:
    """The run after its probes: they join the history (judged), and the best one's spec,
    among them and the earlier probes `reused` for candidates already probed, is the next
    launch's, with why (choose_best)."""
    state, judged = with_probes(state, probes)
    return choose_best(state, judged, reused)


def choose_best(state: State, judged: Sequence[Attempt], reused: Sequence[Attempt] = ()) -> State:
    """The best of the probes (`judged`: this plan's, in the history already; `reused`:
    earlier ones that stand for a candidate) as the next launch's spec, with why. No probe
    trained: the state as it is (the plan must choose again with what they taught: the
    bracket narrower)."""
    chosen = best([*judged, *reused], held_rate(state.history.attempts))
    if chosen is None:
        return state
    held = chosen.held and any(p is chosen for p in judged)  # an earlier plan's was stopped
    planned = PlannedChange(
        strategy=chosen.strategy or "probe",
        reason=f"{chosen.strategy_reason}; {summary(judged, chosen, reused)}",
        changes=chosen.changes,
        continue_job=chosen.job_name if held else None,  # it goes on: its updates kept
    )
    if chosen.strategy:
        state = get_strategy(chosen.strategy).bump_counter(state)
    full = chosen.spec.model_copy(update={"max_updates": None})  # the job's own length again
    return state.model_copy(update={"run_spec": full, "planned_change": planned})
