"""Was this run clean? The one definition every message, report, leaderboard and exit code uses.

An attempt is clean when its job completed, no rule reported an issue on it or could not
judge it (status Error: a rule that read nothing or broke), it ran at least
one update, and its model trained: it meets run_spec.success_criteria (a metric the job did
not report, or whose last value was not finite, is not met), or, when none are given,
- its final training loss (the median of a window of its last steps) is finite and clearly
  below the untrained model's loss: the lowest of the first step's loss of the run's first
  cold start (the model before any update), the median of a window of its first steps (a
  first batch can be noisy), and the loss the run states (run_spec.untrained_loss; the
  built-in job: ln 10, a uniform guess): a window inflated by an unstable start is no
  baseline; and
- where the job's classes are known (run_spec.num_classes; the built-in job's 10), its test
  accuracy (a fraction: a percentage is read as one where its metric definition says so)
  is clearly above chance; and
- where the job reports a test loss (the metric `test:loss`, in its training loss's units:
  the built-in job's), it is clearly below the untrained model's loss too: a model whose
  training loss fell while its test loss did not learned nothing that holds on unseen
  data (not_generalising); and
- its loss was not still speeding up at its end (a launch of 60 updates or more): the last
  third of its steps did not take the loss down by SPEEDING_UP times what the middle third
  did, nor by more than SPEEDING_UP_DROP of the untrained loss. A healthy descent slows as
  the model learns (every healthy run of benchmarks/repair_quality.py: the last third took
  0.05-0.65 of the middle one's drop; a tiny job stopped early, still descending in a
  line: 1.16); one that gains pace at its end was held back by its learning rate (a
  GPT-style job at 1/1000 of its rate, whose schedule raises it towards its floor: 1.76).
  Unless its schedule was annealing the rate over that last third (its mean rate there at
  most ANNEALED times the middle third's, from the step records): a falling rate speeds a
  descent up by itself, as the noise of a high rate settles (examples/tabular under
  OneCycleLR, trained at 10x and 13x its best max_lr: its last third fell 0.074 after a
  middle third that rose, and 2.9x its middle third's drop; the mean rate of its last
  third a fifth of its middle one's).
A run is clean when its last attempt is. A completed attempt whose figures were there to
judge and that fails these (verdict_finding) is more than a flaw: the monitor makes it a
finding that the policy repairs, NOT_TRAINED when its model learned nothing (which way
the rate is wrong unknown), LEARNING_TOO_SLOWLY when it was still speeding up, or learned
nothing while its gradients still agreed or its updates barely moved its weights
(too_small_a_rate: a rate far too small; one far too high sits on a noise floor, its
gradients disagreeing, its updates large). success_criteria replace all
of this.

A run whose length is known is asked sooner, at an eighth, a quarter and half of it, and stopped
there rather than spending the rest (records/asked_early.py).

One descent the loss curve cannot judge at all: a run at a rate far too small whose loss
slows as a converged run's does. Its gradients tell (gradients_agree): far from a minimum
consecutive updates' gradients point the same way, near one each batch's noise outweighs
the mean gradient. Gradients still agreeing at the end of a run with noisy batches are
asked as STILL_DESCENDING is, below.

Nor can the curve judge a run that ended while its schedule was still raising the rate
(rate_rising): the rate it was heading for came late or never. It is asked too.
One descent the figures cannot judge alone: a loss still falling at its end about as fast
as in its middle third (IN_A_LINE up to SPEEDING_UP). A rate far too small descends in a
line; so does a healthy run stopped early (a tiny built-in job: 1.16). Only a run at
another rate tells them apart, so the verdict asks (STILL_DESCENDING, where the run may
probe): probes at higher rates, from the same cold start, for a quarter of the updates
at most (strategies/still_descending.py). One that learned clearly faster shows the rate
held the run back, and the finding is repaired as a stall; none did, and the finding is
withdrawn: the run was clean.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from remedy.state_schema import (
    LEARNING_TOO_SLOWLY,
    NOT_TRAINED,
    STILL_DESCENDING,
    VERDICT_FINDINGS,
    Attempt,
    Finding,
    JobStatus,
    RunSpec,
    State,
)
from remedy.state_schema.update_ratio import HEALTHY_UPDATE_RATIO, TINY_UPDATE_RATIO

# "Clearly below": the final loss at least this share of the untrained loss's size lower.
LOSS_DROP = 0.1
# "Clearly above chance": more than chance by CHANCE_STANDARD_ERRORS standard errors of a
# chance-level score on the test set (when its size is known), and by at least
# CHANCE_MARGIN of the way from chance to a perfect score (a large test set's standard
# error is tiny: 0.112 on 10,000 images is 4 of them above 0.1, and still no model).
CHANCE_STANDARD_ERRORS = 3.0
CHANCE_MARGIN = 0.05
# "Still speeding up": the last third's drop SPEEDING_UP times the middle third's or more,
# and at least SPEEDING_UP_DROP of the untrained loss (below it, two drops of noise).
SPEEDING_UP = 1.5
SPEEDING_UP_DROP = 0.05
# "In a line": the last third's drop IN_A_LINE times the middle third's or more (and at
# least SPEEDING_UP_DROP of the untrained loss): above every healthy run of
# benchmarks/repair_quality.py (0.65 at most), so none of them is asked.
IN_A_LINE = 0.8
# "Still agreeing": the last third's mean cosine of consecutive gradients (1 and 5 updates
# apart, as the job samples them) AGREEING or more at both lags. benchmarks/
# gradient_agreement.py, four scripts at two lengths: every intended run under it at one
# lag at least (the highest: 0.35 and -0.35), the VAE's and the char transformer's runs at
# 1/30 of their rate 0.30-0.91 at both (not a GPT-style one: 0.26 and -0.17).
AGREEING = 0.2
# ... asked only where the batches are noisy: the loss rose on NOISY of the last third's
# steps or more (every mini-batch run of benchmarks/repair_quality.py: 0.38-0.56; a full
# batch under plain gradient descent, examples/moons: 0.02). Without noise, consecutive
# gradients agree near a minimum too, and their agreement tells nothing.
NOISY = 0.2
# "Annealing": the last third's mean learning rate at most ANNEALED times the middle
# third's (a constant rate: 1; cosine to zero: about 0.2; OneCycle: about 0.3).
ANNEALED = 0.75
# "Still rising": the last third's mean learning rate RISING times the middle third's or
# more. A schedule ends a run at its lowest rate or holds it (constant, steps, cosine,
# linear decay, OneCycle; warmup comes first): every run of benchmarks/repair_quality.py
# ended at 1.00x or less but the GPT-style job at 1/30 of its rate, whose cosine decays
# *up* to a floor typed for the intended rate (1.43x and 1.47x; called clean 7 % worse
# at three times its length, its loss slowing and its gradients agreeing at one lag).
RISING = 1 / ANNEALED
# "Fit its data": a classifier's final training loss FIT of its untrained loss or less
# (fit_its_data): on average its training labels get C**-FIT of the probability or more
# (89 % of it among 10 classes, 97 % between 2). A language model's loss never comes near
# (the char transformer at its best: 31 % of ln 65); a classifier of separable data goes on
# towards 0 (the Hugging Face Trainer's classifier at its typed rate: 2.1 % at half its
# length, accuracy 1.0 at its end; asked there at FIT 1 %, its question cost 1.67x).
FIT = 0.05


class Baseline(NamedTuple):
    """An untrained model's loss and where it comes from (said in the verdict's message)."""

    loss: float
    source: str


def start_loss(state: State) -> Baseline | None:
    """The untrained model's loss as measured: over the first steps of the first attempt
    that started cold (a warm-started attempt begins from an already trained model)."""
    current = state.current_attempt
    for attempt in state.history.attempts:
        if attempt.start_step != 0:
            continue
        whose = "its" if attempt is current else f"job {attempt.job_name}'s"
        if (measured := measured_start(attempt, whose)) is not None:
            return measured
    return None


def measured_start(attempt: Attempt, whose: str = "its") -> Baseline | None:
    """The attempt's first window's loss, or its first step's where that is lower: the
    first step's is the model's before any update, and a window that rose above it was
    lifted by an unstable start (a GPT-style job at 100x its rate: first step 5.70, first
    window 6.1, plateau 5.42). None without a finite one. `whose`: the attempt, as the
    message names it."""
    steps = f" {attempt.loss_window}" if attempt.loss_window else ""
    window = f"the median of {whose} first{steps} steps"
    found = [
        Baseline(loss, f"measured: {source}")
        for loss, source in (
            (attempt.initial_window_loss, window),
            (attempt.initial_loss, f"{whose} first step's"),
        )
        if loss is not None and math.isfinite(loss)
    ]
    return min(found, default=None)


def attempt_flaw(attempt: Attempt | None, start: Baseline | None = None) -> str | None:
    """Why an attempt is not clean, in a few words; None when it is. start: the run's
    start_loss (default: the attempt's own first loss)."""
    if attempt is None:
        return "no job was launched"
    if (flaw := job_flaw(attempt)) is not None:
        return flaw
    if attempt.spec.success_criteria:
        return unmet_criterion(attempt)
    measured = measured_start(attempt) if start is None else start
    return (
        unjudged(attempt, measured)
        or untrained(attempt, measured)
        or at_chance(attempt)
        or not_generalising(attempt, measured)
        or speeding_up(attempt)
    )


def job_flaw(attempt: Attempt) -> str | None:
    """What is wrong with the attempt before its model's quality is asked: how its job
    ended, a finding, a rule that could not judge, no update run."""
    stopped_for_a_finding = attempt.outcome is JobStatus.Stopped and attempt.findings
    if attempt.outcome is not JobStatus.Completed and not stopped_for_a_finding:
        return f"the job ended {attempt.outcome.value if attempt.outcome else 'running'}"
    if attempt.findings:  # the reason the flow stopped it, if it did
        found = attempt.findings[0]
        if found.rule in VERDICT_FINDINGS:
            return found.message
        return f"{found.rule} reported an issue"
    if attempt.rule_errors:
        # A rule that could not judge (read nothing, broken) leaves the job unwatched.
        error = attempt.rule_errors[0]
        return f"rule {error.rule} could not judge the job: {error.message}"
    if attempt.steps_run <= 0:
        return "the job completed without running a single update"
    return None


def verdict_finding(attempt: Attempt | None, start: Baseline | None = None) -> Finding | None:
    """The verdict's finding on a completed attempt whose job ran and reported its losses
    (and accuracy): NOT_TRAINED when its model learned nothing, LEARNING_TOO_SLOWLY when it
    learned nothing with its gradients still agreeing or its loss was still speeding up at
    its end; None otherwise (judged by success criteria, the
    figures cannot tell, or it trained). Not a flaw of the job's reporting but of its
    training: the monitor records it, and the policy repairs it as a rule's finding, at the
    attempt's last update."""
    if attempt is None or job_flaw(attempt) or attempt.spec.success_criteria:
        return None
    measured = measured_start(attempt) if start is None else start
    if unjudged(attempt, measured):
        return None
    step = max(attempt.steps_run - 1, 0)  # a hook step: in the launch
    if why := untrained(attempt, measured) or at_chance(attempt):
        return too_small_a_rate(attempt, why, step)
    if why := not_generalising(attempt, measured):  # it trained: no rate far too small
        return Finding(rule=NOT_TRAINED, rule_class=NOT_TRAINED, step=step, message=why)
    if why := speeding_up(attempt):
        return Finding(
            rule=LEARNING_TOO_SLOWLY, rule_class=LEARNING_TOO_SLOWLY, step=step, message=why
        )
    if fit_its_data(attempt, measured):
        return None  # nothing left that a higher rate could win
    # A launch too short for its loss's thirds is not asked at its end by its rate alone
    # (its rates' thirds come from fewer steps, for the early questions).
    rising = rate_rising(attempt) if len(attempt.loss_thirds) == 4 else None
    if why := in_a_line(attempt) or rising or gradients_agree(attempt):
        return Finding(rule=STILL_DESCENDING, rule_class=STILL_DESCENDING, step=step, message=why)
    return None


def fit_its_data(attempt: Attempt, measured: Baseline | None) -> bool:
    """A classifier (its classes known) whose final training loss is FIT or less of the
    untrained model's has fit its training data: a cross-entropy's floor is 0, and a higher
    rate could win at most that share. Its gradients agree there for another reason than a
    rate far too small: every sample is fit, and each batch's gradient points the same way,
    growing the margins (a BERT-style classifier under the Hugging Face Trainer, 0.69 ->
    1e-4, accuracy 1.0: 0.99 at both lags). Not asked STILL_DESCENDING, at its end nor where
    it is held (records/asked_early.py)."""
    known = baselines(attempt, measured)
    final = final_training_loss(attempt)
    if attempt.spec.classes is None or not known or final is None:
        return False
    return 0 <= final <= FIT * min(baseline.loss for baseline in known)


def descent(attempt: Attempt) -> tuple[float, float, float, float, float, float] | None:
    """The attempt's loss at its start, a third, two thirds and its end, with the middle
    third's drop and the last third's; None when its descent is not known (loss_thirds)."""
    if len(attempt.loss_thirds) != 4:
        return None
    start, third, two_thirds, end = attempt.loss_thirds
    return start, third, two_thirds, end, third - two_thirds, two_thirds - end


def speeding_up(attempt: Attempt) -> str | None:
    """Why the attempt's loss was still speeding up at its end; None when it was not, or
    its descent is not known (loss_thirds)."""
    if (known := descent(attempt)) is None or annealed(attempt):
        return None
    start, third, two_thirds, end, middle, last = known
    if last >= SPEEDING_UP * middle and last >= SPEEDING_UP_DROP * abs(start):
        before = (
            f"{SPEEDING_UP:g}x or more the {middle:.3g} of the middle third"
            if middle > 0
            else f"after the middle third took it up {-middle:.3g}"
        )
        return (
            f"the model was still learning ever faster when the run ended: its loss fell "
            f"{last:.3g} in the last third of its steps ({two_thirds:.4g} -> {end:.4g}), "
            f"{before} ({third:.4g} -> {two_thirds:.4g}), as when a learning rate far too "
            f"small holds a run back"
        )
    return None


def annealed(attempt: Attempt) -> bool:
    """Whether the attempt's schedule was annealing its learning rate over its last third
    (rate_thirds); False when its rates are not known."""
    if len(attempt.rate_thirds) != 2:
        return False
    middle, last = attempt.rate_thirds
    return middle > 0 and last <= ANNEALED * middle


def in_a_line(attempt: Attempt) -> str | None:
    """Why the attempt's loss may have been held back: it still fell at its end about as
    fast as in its middle third (not speeding up: that is speeding_up's); None when it
    slowed down as a healthy descent does, or its descent is not known."""
    if (known := descent(attempt)) is None:
        return None
    start, third, two_thirds, end, middle, last = known
    if IN_A_LINE * middle <= last < SPEEDING_UP * middle and last >= SPEEDING_UP_DROP * abs(start):
        return (
            f"the loss still fell in a line when the run ended: {last:.3g} in the last third "
            f"of its steps ({two_thirds:.4g} -> {end:.4g}), {last / middle:.2f}x the "
            f"{middle:.3g} of the middle third ({third:.4g} -> {two_thirds:.4g}), as under a "
            f"learning rate far too small, or in a healthy run stopped early"
        )
    return None


def rate_rising(attempt: Attempt) -> str | None:
    """Why the attempt may have ended before its schedule reached the rate it was heading
    for: its learning rate was still rising over its last third (rate_thirds, RISING);
    None when it was not, or its rates are not known."""
    if len(attempt.rate_thirds) != 2:
        return None
    middle, last = attempt.rate_thirds
    if middle <= 0 or last < RISING * middle:
        return None
    return (
        f"its learning rate was still rising when the run ended: {last:.3g} on average over "
        f"the last third of its steps, {last / middle:.2f}x the middle third's {middle:.3g} "
        f"(a schedule ends a run at its lowest rate), as when a warmup outlasts the run or "
        f"a rate typed far too small sits under the schedule's floor"
    )


def agreement(attempt: Attempt) -> tuple[float, float] | None:
    """The attempt's gradient agreement one and five updates apart (gradient_agreement,
    over the last third of its steps) when both are AGREEING or more: the mean gradient
    still outweighed each batch's noise. None when they were not, were not measured, or its
    batches had no noise to outweigh (loss_rises under NOISY, or not known: a last third
    of fewer than RISES_MIN_PAIRS pairs of losses)."""
    if len(attempt.gradient_agreement) != 2:
        return None
    if attempt.loss_rises is None or attempt.loss_rises < NOISY:
        return None  # no batch noise, or not known: gradients agree near a minimum too
    lag_1, lag_5 = attempt.gradient_agreement
    return None if min(lag_1, lag_5) < AGREEING else (lag_1, lag_5)


def agreeing_words(lag_1: float, lag_5: float, bar: float = AGREEING) -> str:
    """The figures of agreement(), said, with the bar they passed."""
    return (
        f"over the last third of its steps the cosine similarity of consecutive updates' "
        f"gradients averaged {lag_1:.2f}, and {lag_5:.2f} five updates apart ({bar:g} "
        f"or more: the mean gradient still outweighed each batch's noise)"
    )


def gradients_agree(attempt: Attempt) -> str | None:
    """Why the attempt may have ended far from where its loss could go: its gradients still
    agreed over its last third (agreement()); None when they did not."""
    if (agreed := agreement(attempt)) is None:
        return None
    return (
        f"its gradients still agreed when the run ended: {agreeing_words(*agreed)}, as "
        f"under a learning rate far too small, though the loss slowed as a converged run's does"
    )


def tiny_update_ratio(attempt: Attempt) -> float | None:
    """The attempt's update ratio (scaled to the rate it was given: the updates' size at
    its schedule's peak) where it is TINY_UPDATE_RATIO or less: a rate far too small,
    whatever else the run shows; None otherwise, or where none was measured."""
    ratio = attempt.update_ratio
    return ratio if ratio is not None and ratio <= TINY_UPDATE_RATIO else None


def too_small_a_rate(attempt: Attempt, untrained_why: str, step: int) -> Finding:
    """The verdict's finding on an attempt whose model has not learned (untrained_why):
    LEARNING_TOO_SLOWLY when its gradients still agreed (agreement()) or its updates moved
    the weights TINY_UPDATE_RATIO of themselves or less, so its rate is far too small and
    the repair raises it; NOT_TRAINED otherwise, the rate's direction unknown (a rate far
    too high sits on a noise floor, its gradients disagreeing, its updates large)."""
    if (agreed := agreement(attempt)) is not None:
        said = f"its gradients still agreed: {agreeing_words(*agreed)}"
    elif (ratio := tiny_update_ratio(attempt)) is not None:
        said = (
            f"its updates moved the weights {ratio:.2g} of themselves (median per update), "
            f"{TINY_UPDATE_RATIO:g} or less, a tenth of a healthy run's "
            f"{HEALTHY_UPDATE_RATIO:g}"
        )
    else:
        return Finding(rule=NOT_TRAINED, rule_class=NOT_TRAINED, step=step, message=untrained_why)
    why = f"{untrained_why}; and {said}: its learning rate is far too small to move the model"
    return Finding(rule=LEARNING_TOO_SLOWLY, rule_class=LEARNING_TOO_SLOWLY, step=step, message=why)


def unmet_criterion(attempt: Attempt) -> str | None:
    for criterion in attempt.spec.success_criteria:
        measured = attempt.metrics.get(criterion.metric)
        if measured is None:
            reported = ", ".join(sorted(attempt.metrics)) or "none"
            # A script's printed figure becomes a metric only through a definition.
            defined = {d.name for d in attempt.spec.metric_definitions}
            undefined = not attempt.spec.job.ours and criterion.metric not in defined
            hint = "; run_spec.metric_definitions has none" if undefined else ""
            return (
                f"success criterion {criterion}: the job reported no {criterion.metric} "
                f"(reported: {reported}{hint})"
            )
        if not criterion.holds(measured):
            return f"success criterion {criterion} not met ({criterion.metric} {measured:.4g})"
    return None


def stated_untrained_loss(spec: RunSpec) -> Baseline | None:
    """The untrained loss the run states or the job is known to have, and where it comes from."""
    if spec.untrained_loss is not None:
        return Baseline(spec.untrained_loss, "run_spec.untrained_loss")
    if spec.job.cross_entropy_over_classes and spec.classes is not None:
        return Baseline(math.log(spec.classes), f"ln {spec.classes}, a uniform guess")
    return None


def final_training_loss(attempt: Attempt) -> float | None:
    # Training loss against training loss: a test loss (eval mode, other data) is not
    # comparable with the first steps' loss.
    if attempt.final_window_loss is not None:
        return attempt.final_window_loss
    return attempt.metrics.get("train:loss", attempt.final_loss)


def baselines(attempt: Attempt, start: Baseline | None) -> list[Baseline]:
    """The untrained model's loss, measured and stated, finite ones only, with where each
    comes from."""
    found = [start] if start is not None else []
    if (stated := stated_untrained_loss(attempt.spec)) is not None:
        found.append(stated)
    return [baseline for baseline in found if math.isfinite(baseline.loss)]


def unjudged(attempt: Attempt, start: Baseline | None) -> str | None:
    """Why the job's figures cannot tell whether its model trained; None when they can."""
    if not baselines(attempt, start):
        return "no finite loss was reported at the start: cannot tell whether the model trained"
    final = final_training_loss(attempt)
    if final is None or not math.isfinite(final):
        return "no finite final loss was reported: cannot tell whether the model trained"
    if (bar := chance_bar(attempt.spec)) is not None:
        accuracy = test_accuracy(attempt)
        if accuracy is None or not math.isfinite(accuracy):
            return (
                f"no test:accuracy was reported: cannot tell whether the model beats chance "
                f"({bar[0]:.3g} for {attempt.spec.classes} classes)"
            )
        if not 0 <= accuracy <= 1:  # a percentage read as it was printed: 10 is not > 0.1
            return (
                f"test:accuracy {accuracy:.4g} is not a fraction between 0 and 1: cannot tell "
                f"whether the model beats chance ({bar[0]:.3g} for {attempt.spec.classes} "
                f'classes); a job printing a percentage: "percent": true on its metric '
                f"definition"
            )
    return None


def untrained(attempt: Attempt, start: Baseline | None) -> str | None:
    """Judged figures only (unjudged() is None)."""
    why = loss_not_below(attempt, start)
    return None if why is None else f"the model did not train: final training {why}"


def loss_not_below(attempt: Attempt, start: Baseline | None, drop: float = LOSS_DROP) -> str | None:
    """`loss L (median of the last N steps) is not 10% below the untrained model's B (...)`
    when the attempt's latest training loss is not `drop` below the untrained one."""
    final = final_training_loss(attempt)
    found = baselines(attempt, start)
    if final is None or not found:
        return None
    baseline, why = min(found)
    if final > baseline - drop * abs(baseline):
        window = f" {attempt.loss_window} steps" if attempt.loss_window else " step"
        last = f" (median of the last{window})" if attempt.final_window_loss is not None else ""
        return (
            f"loss {final:.4g}{last} is not "
            f"{drop * 100:g}% below the untrained model's {baseline:.4g} ({why})"
        )
    return None


def not_generalising(attempt: Attempt, start: Baseline | None) -> str | None:
    """Why what the model learned does not hold on unseen data: the test loss its job
    reports (`test:loss`, in its training loss's units: the built-in job's mean
    cross-entropy) is not LOSS_DROP below the untrained model's, while its training loss
    is. None without a finite test:loss. The built-in ReLU job with batch norm at lr 0.1:
    training loss 0.26, test loss 13.2 against ln 10, test accuracy 0.17, past chance's
    bar (0.145) and called clean."""
    test = attempt.metrics.get("test:loss")
    found = baselines(attempt, start)
    final = final_training_loss(attempt)
    if test is None or not math.isfinite(test) or not found or final is None:
        return None
    baseline, why = min(found)
    if test <= baseline - LOSS_DROP * abs(baseline):
        return None
    return (
        f"the model did not learn what holds on unseen data: its test loss {test:.4g} is not "
        f"{LOSS_DROP * 100:g}% below the untrained model's {baseline:.4g} ({why}), while its "
        f"training loss fell to {final:.4g}"
    )


def test_accuracy(attempt: Attempt) -> float | None:
    """The job's final test:accuracy: its reported metric, else the attempt's field."""
    return attempt.metrics.get("test:accuracy", attempt.final_accuracy)


def accuracy_unread(spec: RunSpec) -> str | None:
    """What the first launch's log says of a user's job whose classes are stated (its
    test:accuracy is judged) where no metric definition reads a test:accuracy: unless the
    job reports one itself, no run of it can end clean. None otherwise."""
    if spec.is_builtin or spec.num_classes is None:
        return None
    names = [d.name for d in spec.metric_definitions]
    if "test:accuracy" in names:
        return None
    alike = [name for name in names if name.lower().endswith(("accuracy", "acc"))]
    hint = f" ({', '.join(alike)}: name it test:accuracy to have it judged)" if alike else ""
    return (
        f"num_classes is {spec.num_classes}: a clean run's test:accuracy must beat chance "
        f"({1 / spec.num_classes:.3g}), but no metric definition reads test:accuracy{hint}; "
        'unless the job reports it itself (result.json "metrics" or metric lines, '
        "docs/job-contract.md), no run of it can end clean"
    )


def chance_bar(spec: RunSpec) -> tuple[float, float] | None:
    """(chance accuracy, the accuracy a trained model must exceed); None: classes unknown."""
    if spec.classes is None:
        return None
    chance = 1 / spec.classes
    margin = CHANCE_MARGIN * (1 - chance)
    samples = spec.num_test_samples
    if samples:
        standard_error = math.sqrt(chance * (1 - chance) / samples)
        margin = max(margin, CHANCE_STANDARD_ERRORS * standard_error)
    return chance, chance + margin


def at_chance(attempt: Attempt) -> str | None:
    if (bar := chance_bar(attempt.spec)) is None:
        return None
    chance, needed = bar
    accuracy = test_accuracy(attempt)
    if accuracy is None or not math.isfinite(accuracy):
        return None  # unjudged() says so
    if accuracy <= needed:
        return (
            f"the model did not learn: test accuracy {accuracy:.3g} is not clearly above "
            f"chance {chance:.3g} for {attempt.spec.classes} classes (needs > {needed:.3g})"
        )
    return None


def attempt_is_clean(attempt: Attempt, start: Baseline | None = None) -> bool:
    return attempt_flaw(attempt, start) is None


def run_flaw(state: State) -> str | None:
    return attempt_flaw(state.current_attempt, start_loss(state))


def run_verdict_finding(state: State) -> Finding | None:
    """The verdict's finding on the run's last attempt. STILL_DESCENDING is a question only
    probes answer: without them (budgets.probe_steps 0) the run is not asked it."""
    found = verdict_finding(state.current_attempt, start_loss(state))
    if found is not None and found.rule == STILL_DESCENDING and state.budgets.probe_steps <= 0:
        return None
    return found


def run_is_clean(state: State) -> bool:
    return run_flaw(state) is None
