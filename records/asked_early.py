"""The verdict's questions to a launch still running, where its length is known.

The built-in job reports its length; a script states it by mapping its max_steps role, or
its num_epochs role times the epoch the launcher measures (or the spec states). A launch
from a cold start is asked, while it runs, whether its model has begun to learn: at each
share of its length in ASKED_AT, its loss must be that share of the end's LOSS_DROP below
the untrained model's (1.25 % at an eighth, 2.5 % at a quarter, 5 % at half, 10 % at the
end). One that is not is stopped there, rather than spending the rest of its length:

- at an eighth and at a quarter, only when its schedule is not still raising the rate
  towards the rate it was given (a warmup holds the loss up; a cosine decaying *up* to a
  floor typed for another rate does not; nor does a warmup whose updates, scaled to its
  peak, would still be tiny: tiny_update_ratio), and either the launch's gradients still agree
  (records/verdict.py: agreement, over the last third of what it ran: its rate is far too
  small, the finding LEARNING_TOO_SLOWLY, and the repair raises the rate) or its rates are
  known (NOT_TRAINED: a rate far too high sits on a noise floor, its gradients
  disagreeing). A script that records no rate and whose gradients disagree may be in a
  warmup no figure shows: it is left to half. Replayed on benchmarks/repair_quality.py's
  first launches (benchmarks/early_questions.py): at a quarter, every run that learned
  nothing 0.0-1.2 % below its start, those at 1/1000 of their rate agreeing 0.76-0.95 at
  both lags, the GPT-style job at 100x -0.25 and 0.13, its cosine falling 0.59 -> 0.56;
  every healthy or intended run 7.9-49.6 % below, the built-in demo's repaired run 21 %
  above (its rate rising after its warmup epoch, 0.0031 -> 0.059); a GPT-style job at 1/30
  of its rate, learning slowly, 3.1 %. At an eighth (asked since; 40 updates at least, so
  a job of 320 or more): the runs that learned nothing -0.7 to 1.0 % below their start,
  every healthy or intended run 4.0 % or more (the built-in demo's repaired run 24 % before
  its rate rises); the GPT-style job at 100x stopped at update 57 instead of 101, the
  repair's updates in all 1.32x the final run's instead of 1.45x;
- at half, NOT_TRAINED (which way the rate is wrong, unknown), or LEARNING_TOO_SLOWLY when
  its gradients agree. Every healthy or intended run of the benchmark had its loss 17-96 %
  below the untrained model's at half its length; the runs that learned nothing 0.1-3.5 %;
  the GPT-style job at 1/30, 7.9 % (asked with the end's 10 %, it was searched as a
  plateau, and its short probes chose a rate that ended 13 % above its intended run's
  loss; run to its end, its descent in a line is asked by probes at higher rates). One
  past 5 % but short of 10 %, under a steady rate, whose loss falling on at its pace over
  the last two thirds of what it ran would still end short of 10 % is found there too
  (short_at_its_pace): the end's question, asked at half.

Where the flow can wait for its answers, a launch is asked at the update itself: one whose
backend can continue a job holds at each of these points of its known length (hold_point,
then next_hold_point; the job waits between two updates, as a probe waits at its bound)
while the flow asks, and is let go on to the next (without holding, a fast job is asked at
the monitor's next look: the char transformer at 1/1000 was seen, asked and stopped at
update 80 and 95 of a 400-update job, not at 50); one whose length is its epochs over a
DataLoader holds once its job measured one, at the first of these points past it
(epochs_to_hold_by: the job says where, training/launch.py), then at the next. A quarter
and half are asked one more question there. Its loss moved, so it has begun to learn, but
a rate far too small learns too: its gradients still agreeing then (both lags 0.2 or
more over the last third of what it ran, 0.5 at a quarter: held_question; at half
the char transformer, the VAE and the word LM at 1/30 of their rate 0.94/0.94, 0.72/0.68,
0.46/0.35; every healthy or intended run of the benchmark under 0.2 at one lag at least,
0.40/-0.20 the highest) ask STILL_DESCENDING, the end's open question, there: probes at
higher rates answer it (strategies/still_descending.py); none learning faster, the held
job goes on to its end, its updates kept. Asked at its end instead, such a run spent the
whole of its length before the probes (2.2-3.9x the final run's updates in all). A job
that cannot wait (the cloud service's) is not held and not asked this: a "no" would cost
the run itself on a script that cannot resume.

Held at a quarter, a launch that learned, its gradients not agreeing, is asked the other
way too: its loss fell fast and then levelled off (settled_question), as on the noise floor
of a rate far too high, where no rule fires and the run would be called clean (the char
transformer at 100x its rate, 18 % above its intended run's loss at its end): the finding
SETTLED_EARLY, answered by probes at lower rates (strategies/still_descending.py).

A run judged by success_criteria is not asked: its own figures say. A warm start is not
asked: it began from a trained model. Nor is a launch seen at its last update: its end's
question (records/verdict.py) comes when its job completes.
"""

from __future__ import annotations

from collections.abc import Callable

from remedy.records.verdict import (
    AGREEING,
    LOSS_DROP,
    Baseline,
    agreeing_words,
    agreement,
    baselines,
    fit_its_data,
    loss_not_below,
    rate_rising,
    start_loss,
    tiny_update_ratio,
    too_small_a_rate,
)
from remedy.state_schema import (
    SETTLED_EARLY,
    STILL_DESCENDING,
    Attempt,
    Finding,
    RunSpec,
    State,
)
from remedy.state_schema.asking_points import (
    ASKED_AT,
    ASKED_MIN_STEPS,
    EIGHTH,
    HALF,
    QUARTER,
    SHARE_WORDS,
    asking_point,
    hold_points,
)

# What a launch whose length remedy cannot know misses (said where it is warned of).
ASKED_ONLY_AT_END = (
    "it is asked whether its model learns only at its end, not at an eighth, a quarter and "
    "half of it"
)

# A rate this far above the one the job was given is past it: a warmup that has just
# reached its rate averages at it (a mean of floats can land a hair above).
PAST_TYPED = 1.1


def hold_point(spec: RunSpec) -> int | None:
    """Where a cold start of `spec` first holds to be asked whether its model has begun to
    learn: the soonest share of its length, known before it runs (RunSpec.known_length),
    long enough to be asked (hold_points); None otherwise, or where it is not held at all
    (held_at_all: a warm start, a run judged by its success_criteria)."""
    return next_hold_point(spec, 0)


def next_hold_point(spec: RunSpec, held_at: int, epoch_updates: int | None = None) -> int | None:
    """Where a cold start of `spec`, let go on from its hold after `held_at` updates, holds
    next to be asked (an eighth, then a quarter, then half: hold_points); None past half,
    or where its length is not known (`epoch_updates`: an epoch as its job measured it,
    Attempt.epoch_updates), or where it is not held at all."""
    if not held_at_all(spec):
        return None
    length = spec.known_length(epoch_updates)
    further = [p for p in hold_points(length) if p > held_at] if length is not None else []
    return further[0] if further else None


def held_at_all(spec: RunSpec) -> bool:
    """A launch of `spec` may hold to be asked: a cold start (no checkpoint), not
    judged by its own figures (success_criteria), not bounded already (a probe's
    max_updates)."""
    return not (spec.success_criteria or spec.init_checkpoint or spec.max_updates is not None)


# Fewest epochs whose half lies past the first one, where the job measures its epoch.
HELD_BY_EPOCHS_MIN = 3


def epochs_to_hold_by(spec: RunSpec) -> int | None:
    """A cold start whose length is counted in epochs that only its job measures (its
    num_epochs role, no updates_per_epoch stated: a DataLoader's first pass,
    training/epoch_length.py) holds, once its job has measured one, at the first share of
    them to be asked past it (run_spec.hold_by_epochs; then at the next, as a length known
    before it runs: next_hold_point): those epochs, where half lies past the first
    (HELD_BY_EPOCHS_MIN); None otherwise, or where it is not held at all (held_at_all)."""
    if not held_at_all(spec) or spec.known_length() is not None:
        return None
    if not spec.has_role("num_epochs"):
        return None
    epochs = spec.role("num_epochs")
    if not isinstance(epochs, int) or isinstance(epochs, bool) or epochs < HELD_BY_EPOCHS_MIN:
        return None
    return epochs


def held_question(described: Attempt, length: int, share: float) -> Finding | None:
    """STILL_DESCENDING on a launch held at a quarter or half of its length (`share`)
    whose loss moved but whose gradients still agree at both lags (agreement: AGREEING,
    0.2, or more; at a quarter AGREEING_AT_A_QUARTER, and not while a warmup still raises
    its rate: small rates agree too): its rate may be far too small. None otherwise (or
    where its batches had no noise to tell by). The VAE at 1/30 of its rate, held at
    update 86 of 344 and asked there: 490 updates in all for its final 344 (578 asked at
    half). A healthy run still in its fast descent may agree at half too (a 1-D CNN on
    RMSprop at its default rate, 24 % below its start there: 0.37/0.45): the probes
    answer (a rate that learns no faster leaves it to go on). A bar of 0.5 at half spared
    it the question, but its loss still fell in a line at its end and it was asked there,
    later; and the VAE at 1/30 at three times its length (about 0.33/0.32) ran to its
    end: 2.06x its final run's updates."""
    quarter = share == QUARTER
    bar = AGREEING_AT_A_QUARTER if quarter else AGREEING
    agreed = agreement(described)
    if agreed is None or min(agreed) < bar or (quarter and warming_up(described)):
        return None
    why = (
        f"the model learned in the first {described.steps_run} of the job's {length} "
        f"updates, but its gradients still agreed: {agreeing_words(*agreed, bar)}, as "
        "under a learning rate far too small"
    )
    step = max(described.steps_run - 1, 0)
    return Finding(rule=STILL_DESCENDING, rule_class=STILL_DESCENDING, step=step, message=why)


# At a quarter, its gradients agree this much or more at both lags to be asked half's
# question there: the runs at 1/30 of their rate 0.69-0.95 at a quarter (the GPT-style
# job 0.69/0.67, the VAE 0.80/0.82, the char transformer 0.94/0.95); every healthy or
# intended run of benchmarks/repair_quality.py 0.21 or less at one lag at least (the char
# transformer's intended run 0.21/0.20; earlier in a run the gradients agree more than
# at half, where AGREEING's 0.2 is the bar).
AGREEING_AT_A_QUARTER = 0.5


# "Levelled off": over the second and last thirds of what a launch held at a quarter of its
# length ran, its loss fell LEVELLED or less of what it fell in the first third. Its bar
# lies between the fault and the nearest healthy run over seeds, not one trace: a rate's
# noise floor is chaotic, so each seed (and each machine's floats) draws another trace.
# The char transformer at 100x its rate (AdamW at 0.1), 36 seeds at update 100 of 400:
# -0.06 to 0.21, under 0.075 on 26 (0.012 on the trace the first bar, 0.05, was fitted
# to; 0.059 for the same seed on another machine's floats); the VAE's healthy 1,376-update
# run, 8 seeds at update 344: 0.10 to 0.16 (benchmarks/levelled_seeds.py); every other
# healthy or intended run of benchmarks/repair_quality.py 0.23 or more. At an eighth the
# char transformer's 1,200-update healthy run 0.16 against the fault's 0.07: too near to
# ask there; at half the fault's loss wanders on its floor (0.18): asked at a quarter only.
LEVELLED = 0.075
# ... and by no more than LEVEL_FALL of its loss at the first third's end: a floor is flat
# where it lies, while a healthy run whose first third held a large fall (a regression's
# MSE, 178 -> 10.7 as it learned the targets' mean) still falls a share of where it is
# (10.7 -> 8.0, 25 %, on Lion at its best rate; asked by LEVELLED alone, 0.016). The
# fault's 36 seeds -0.03 to 0.11 (a floor's trace rises as often as it falls); the VAE's
# healthy run 0.045 to 0.066. With both bars 26 of the fault's 36 seeds are asked (20 with
# the first bars, 0.05 and 0.02) and none of the VAE's 8; the others, still falling at a
# quarter, are found at their end (LossPlateau) and probed then.
LEVEL_FALL = 0.04


def settled_question(described: Attempt, share: float) -> Finding | None:
    """SETTLED_EARLY on a launch held at a quarter of its length whose loss fell fast
    in the first third of its updates and levelled off over the other two (LEVELLED and
    LEVEL_FALL), not
    in a warmup: the noise floor of a rate far too high (an AdamW job at 100x its rate
    called clean at its end, 18 % above its intended run's loss), or a model that learned
    what it could early. Probes at lower rates tell them apart (strategies/
    still_descending.py). None otherwise."""
    if share != QUARTER or len(described.loss_thirds) != 4 or warming_up(described):
        return None
    start, third, _, end = described.loss_thirds
    first, later = start - third, third - end
    # A loss at or below 0 (a log-likelihood) has no level to take a share of: not asked.
    if first <= 0 or third <= 0 or later > LEVELLED * first or later > LEVEL_FALL * third:
        return None
    why = (
        f"the model's loss fell from {start:.4g} to {third:.4g} in the first third of its "
        f"{described.steps_run} updates, then levelled off ({end:.4g} at update "
        f"{described.steps_run}, {later / first:.0%} of the first third's drop, under "
        f"{LEVELLED:.1%}, and {later / third:.1%} of where it was, under {LEVEL_FALL:.0%}), "
        "as on the noise floor of a learning rate far too high"
    )
    step = max(described.steps_run - 1, 0)
    return Finding(rule=SETTLED_EARLY, rule_class=SETTLED_EARLY, step=step, message=why)


# A rate whose last third of a launch's updates averages within this share of its middle
# third's is steady: a constant rate (a cosine decay over the whole job falls about 26 %
# between those thirds of its first half).
STEADY_RATE = 0.02


def steady(middle: float, last: float) -> bool:
    return middle > 0 and abs(last - middle) <= STEADY_RATE * middle


def short_at_its_pace(described: Attempt, length: int, measured: Baseline | None) -> str | None:
    """At half its length, a launch past half's bar but not yet the end's (LOSS_DROP below
    the untrained model's loss) whose loss, falling on to its end at its pace over the last
    two thirds of what it ran (loss_thirds: a third's median alone is too noisy to take a
    pace from), would still end short of the end's bar: what the
    end's question would find, found at half. The spirals classifier at 1/30 of its rate
    fell 1.095 -> 1.013 in its first 60 updates, then 0.005 in the next 120 (the last
    third's median alone fell 0.011, as the noise went): asked at its end, it ran all 360
    (NotTrained, 7 % below; 819 updates in all for its final 360).
    Only under a rate known to be steady (rate_thirds within STEADY_RATE): a schedule
    that anneals it may speed the fall up (a one-cycle run's loss fell fastest in its last
    third), and a rate not recorded may be scheduled. None where the figures cannot tell
    (too short for thirds) or it reaches the bar."""
    if len(described.loss_thirds) != 4 or not described.steps_run:
        return None
    if len(described.rate_thirds) != 2 or not steady(*described.rate_thirds):
        return None
    found = baselines(described, measured)
    if not found:
        return None
    baseline, where = min(found)
    _, third, _, end = described.loss_thirds
    fall = max(third - end, 0.0)
    projected = end - fall / (described.steps_run * 2 / 3) * (length - described.steps_run)
    bar = baseline - LOSS_DROP * abs(baseline)
    if projected <= bar:
        return None
    return (
        f"its loss fell {fall:.3g} over the last two thirds of its {described.steps_run} "
        f"updates (to {end:.4g}); at that pace it would end at {projected:.4g}, not "
        f"{LOSS_DROP:.0%} below the untrained model's {baseline:.4g} ({where})"
    )


def warming_up(described: Attempt) -> bool:
    """Its schedule is still raising the rate towards the one it was given (a warmup:
    small rates learn slowly and their gradients agree, as a rate far too small does);
    not one rising past it (past_its_typed_rate)."""
    return bool(rate_rising(described)) and not past_its_typed_rate(described)


def told_before_half(described: Attempt) -> bool:
    """A launch that has not learned by an eighth or a quarter of its length is asked
    there when its schedule is not raising the rate towards the one it was given (a warmup
    holds a loss up) and either its gradients agree (its rate far too small) or its rates
    are known (a rate steady or falling: the rate is wrong, either way). A script that
    records no rate (no torch optimizer) and whose gradients disagree may be warming up
    unseen: it is left to half. A warmup is no excuse where the updates, scaled to the
    rate the job was given (update_ratio), would still move the weights TINY_UPDATE_RATIO
    of themselves or less at its peak: a fine-tuning script warming up over 120 updates
    at 1/1000 of its rate moved them 5.4e-6 (a healthy run 1e-3); left to half, it spent
    200 updates before its probes (873 in all for its final 400)."""
    if warming_up(described) and tiny_update_ratio(described) is None:
        return False
    return agreement(described) is not None or len(described.rate_thirds) == 2


def past_its_typed_rate(described: Attempt) -> bool:
    """Its rate over the last third of what it ran is over PAST_TYPED times the learning
    rate the job was given (the learning_rate role): a schedule rising past it is no
    warmup towards it, but one whose floor was typed for another rate (a cosine decaying
    *up* to a min_lr above a rate typed far too small: the GPT-style job at 1/1000, 6e-6
    typed, 4.6e-5 at a quarter)."""
    spec = described.spec
    typed = spec.role("learning_rate") if spec.has_role("learning_rate") else None
    if not isinstance(typed, int | float) or typed <= 0 or len(described.rate_thirds) != 2:
        return False
    return described.rate_thirds[-1] > PAST_TYPED * typed


def asked_early(
    state: State,
    length: int | None,
    with_descent: Callable[[Attempt], Attempt],
    seen_before: int | None = None,
    held: bool = False,
) -> Finding | None:
    """The finding on the run's current attempt, still running, when its model has not
    begun to learn by the latest share of its length it has reached (ASKED_AT); None
    otherwise, or where its figures cannot tell. `length`: the job's updates in all.
    `with_descent`: the attempt with the descent figures of its step records so far
    (gradient_agreement, rate_thirds, loss_rises), read only when the loss alone says it
    has not begun to learn. `seen_before`: the step an earlier look saw (None: none); a
    quarter is asked at the first look past it only, so a launch it left running (a rate
    too high, a warmup) does not have its records read again at every look until half.
    `held`: the job holds where it is asked (hold_point); held at a quarter or half of its
    length, a model that has begun to learn, its gradients still agreeing, is asked too
    whether its rate holds it back (held_question)."""
    attempt = state.current_attempt
    if attempt is None or length is None or attempt.start_step != 0 or attempt.findings:
        return None
    if attempt.spec.success_criteria or attempt.steps_run >= length:
        return None  # judged by its criteria; or at its end, asked when its job completes
    reached = [s for s in ASKED_AT if attempt.steps_run >= asking_point(length, s)]
    if not reached or asking_point(length, reached[-1]) < ASKED_MIN_STEPS:
        return None
    share = reached[-1]
    if share < HALF and seen_before is not None and seen_before >= asking_point(length, share):
        return None  # asked at an earlier look
    measured = start_loss(state)
    if attempt.final_window_loss is None or not baselines(attempt, measured):
        return None
    if (why := loss_not_below(attempt, measured, LOSS_DROP * share)) is None:
        # Past half's bar, short of the end's: asked its pace once, at the first look past
        # half (a launch left running would have its records read again at every look).
        first_past_half = seen_before is None or seen_before < asking_point(length, HALF)
        pace = share == HALF and first_past_half and loss_not_below(attempt, measured) is not None
        asked_more = held and share != EIGHTH and not fit_its_data(attempt, measured)
        if not (pace or asked_more):
            return None
        described = with_descent(attempt)
        if pace and (short := short_at_its_pace(described, length, measured)) is not None:
            untrained_why = (
                f"the model learns too slowly to train by the end of the job's {length} "
                f"updates: {short}"
            )
            return too_small_a_rate(described, untrained_why, max(attempt.steps_run - 1, 0))
        if not asked_more:
            return None
        return held_question(described, length, share) or settled_question(described, share)
    described = with_descent(attempt)
    if share < HALF and not told_before_half(described):
        return None  # a warmup may hold the loss up: asked at half
    words = SHARE_WORDS[share]
    where = words if attempt.steps_run == asking_point(length, share) else f"past {words}"
    untrained_why = (
        f"the model has not begun to learn by update {attempt.steps_run}, {where} of the "
        f"job's {length}: its training {why}"
    )
    return too_small_a_rate(described, untrained_why, max(attempt.steps_run - 1, 0))
