"""A run is clean in one place: completed, no finding, and its model trained."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from remedy.records.asked_early import asked_early, hold_point, next_hold_point
from remedy.records.verdict import (
    attempt_flaw,
    run_flaw,
    run_is_clean,
    run_verdict_finding,
)
from remedy.state_schema import (
    LEARNING_TOO_SLOWLY,
    NOT_TRAINED,
    SETTLED_EARLY,
    STILL_DESCENDING,
    Attempt,
    Budgets,
    Finding,
    JobStatus,
    RuleStatus,
    RunSpec,
    State,
)
from tests.helpers.attempts import ended


def test_a_completed_attempt_whose_loss_fell_is_clean() -> None:
    assert run_is_clean(ended())


def test_what_is_not_clean_and_why() -> None:
    assert not run_is_clean(State())
    assert attempt_flaw(None) == "no job was launched"
    stopped = ended(outcome=JobStatus.Stopped)
    assert attempt_flaw(stopped.current_attempt) == "the job ended Stopped"
    found = ended(findings=[Finding(rule="Overfit")])
    assert attempt_flaw(found.current_attempt) == "Overfit reported an issue"
    idle = ended(steps_run=0)
    assert "without running a single update" in run_flaw(idle)


def test_a_model_that_did_not_train_is_not_clean() -> None:
    # e.g. a language model whose learning rate drove it above a uniform guess, all finite
    assert "did not train" in run_flaw(ended(initial_loss=9.1, final_loss=11.9))
    assert "did not train" in run_flaw(ended(initial_loss=2.30, final_loss=2.25))
    assert "no finite final loss" in run_flaw(ended(final_loss=None))
    # the built-in job's bar without a measured start: ln 10, a uniform guess
    assert run_is_clean(ended(initial_loss=None))
    script = State(run_spec=RunSpec(source_dir=".", entry_point="train.py"))
    unknown = ended(script, initial_loss=None)
    assert "no finite loss was reported at the start" in run_flaw(unknown)


def test_a_warm_started_attempt_is_judged_against_the_start_of_the_run() -> None:
    first = ended(outcome=JobStatus.Stopped, initial_loss=2.3, final_loss=0.3)
    # the warm start begins near 0.3 and ends at 0.29: judged against 2.3, it trained
    warm = ended(first, "k", start_step=100, initial_loss=0.3, final_loss=0.29)
    assert run_is_clean(warm)


def test_success_criteria_replace_the_default() -> None:
    spec = RunSpec(success_criteria=[{"metric": "test:accuracy", "op": ">=", "value": 0.9}])
    state = State(run_spec=spec)
    good = ended(state, metrics={"test:accuracy": 0.93}, initial_loss=None)
    assert run_is_clean(good)
    bad = ended(state, metrics={"test:accuracy": 0.5})
    assert run_flaw(bad) == "success criterion test:accuracy >= 0.9 not met (test:accuracy 0.5)"
    missing = ended(state, metrics={"train:loss": 0.1})
    assert "reported no test:accuracy (reported: train:loss)" in run_flaw(missing)


def test_a_criterion_can_name_a_metric_of_the_scripts_log() -> None:
    ppl = {"name": "test:perplexity", "regex": r"test ppl ([0-9.]+)"}
    spec = RunSpec.model_validate(
        {
            "source_dir": ".",
            "entry_point": "main.py",
            "metric_definitions": [ppl],
            "success_criteria": [{"metric": "test:perplexity", "op": "<", "value": 500}],
        }
    )
    state = State(run_spec=spec)
    assert run_is_clean(ended(state, metrics={"test:perplexity": 148.4, "train:loss": 4.9}))
    high = ended(state, metrics={"test:perplexity": 3000.0})
    assert run_flaw(high) == (
        "success criterion test:perplexity < 500 not met (test:perplexity 3000)"
    )
    # the job never printed it (or its last value was not finite): not clean, and said
    never = run_flaw(ended(state, metrics={"train:loss": 4.9}))
    assert never == (
        "success criterion test:perplexity < 500: the job reported no test:perplexity "
        "(reported: train:loss)"
    )
    # a criterion on a figure no definition finds says where it is missing
    undefined = State(run_spec=spec.model_copy(update={"metric_definitions": []}))
    assert run_flaw(ended(undefined, metrics={"train:loss": 4.9})).endswith(
        "(reported: train:loss; run_spec.metric_definitions has none)"
    )


def test_a_rule_that_could_not_judge_the_job_leaves_it_not_clean() -> None:
    # Issue 12: e.g. DeadRelu on a job that saved no activations reports Error.
    error = Finding(rule="DeadRelu", status=RuleStatus.Error, message="read nothing in 40 steps")
    state = ended(rule_errors=[error])
    assert not run_is_clean(state)
    assert run_flaw(state) == "rule DeadRelu could not judge the job: read nothing in 40 steps"


def test_the_losses_judged_are_windows_not_one_batch() -> None:
    # an unstable start: the first batch's loss is 3.5, the first 16 steps' median 2.35;
    # the last 16 steps' median 2.29 is below the first batch and not below the window
    state = ended(
        initial_loss=3.5, initial_window_loss=2.35, final_loss=2.28,
        final_window_loss=2.29, loss_window=16,
    )  # fmt: skip
    assert run_flaw(state) == (
        "the model did not train: final training loss 2.29 (median of the last 16 steps) "
        "is not 10% below the untrained model's 2.303 (ln 10, a uniform guess)"
    )
    # a loss inflated over the whole first window too: ln 10 is the built-in job's bar
    inflated = ended(
        initial_loss=9.5, initial_window_loss=9.0, final_window_loss=2.2, loss_window=16
    )
    assert "below the untrained model's 2.303 (ln 10, a uniform guess)" in run_flaw(inflated)
    trained = ended(initial_window_loss=2.35, final_window_loss=0.5, loss_window=16)
    assert run_is_clean(trained)


def test_a_first_window_lifted_by_an_unstable_start_is_no_baseline() -> None:
    """The GPT-style example at 100x its rate (benchmarks/repair_quality.py): its first
    step's loss 5.70 (the untrained model's), its first window lifted to 6.1 by the first
    updates, then a plateau at 5.42: 11 % below the window, 5 % below the untrained model.
    It learned nothing worth the name; the first step's loss is the bar."""
    spec = RunSpec(source_dir=".", entry_point="train.py", hyperparameters={"lr": 0.6})
    state = ended(
        State(run_spec=spec), initial_loss=5.70, initial_window_loss=6.1,
        final_window_loss=5.42, loss_window=20,
    )  # fmt: skip
    assert run_flaw(state) == (
        "the model did not train: final training loss 5.42 (median of the last 20 steps) "
        "is not 10% below the untrained model's 5.7 (measured: its first step's)"
    )
    assert run_verdict_finding(state).rule == NOT_TRAINED
    learned = ended(
        State(run_spec=spec), initial_loss=5.70, initial_window_loss=6.1,
        final_window_loss=3.2, loss_window=20,
    )  # fmt: skip
    assert run_is_clean(learned)


def test_the_untrained_loss_names_the_attempt_it_was_measured_on() -> None:
    """A relaunch judged against the run's first cold start says so: the bar is that
    job's first window, not the relaunch's own."""
    spec = RunSpec(source_dir=".", entry_point="train.py")
    first = ended(
        State(run_spec=spec), job="first", initial_loss=6.0, initial_window_loss=5.5,
        final_window_loss=5.4, loss_window=20,
    )  # fmt: skip
    assert run_flaw(first).endswith(
        "untrained model's 5.5 (measured: the median of its first 20 steps)"
    )
    relaunch = ended(
        first, job="second", initial_loss=3.0, initial_window_loss=2.9,
        final_window_loss=5.2, loss_window=20,
    )  # fmt: skip
    assert run_flaw(relaunch).endswith(
        "untrained model's 5.5 (measured: the median of job first's first 20 steps)"
    )


def test_a_classifier_at_chance_is_not_clean() -> None:
    # the built-in job has 10 classes: 0.112 and 0.109 are chance, whatever the test set size
    for accuracy, samples in ((0.112, 10_000), (0.109, 1000), (0.2, 64)):
        state = ended(State(run_spec=RunSpec(test_samples=samples)), final_accuracy=accuracy)
        flaw = run_flaw(state)
        assert flaw is not None and flaw.startswith(
            f"the model did not learn: test accuracy {accuracy:.3g} is not clearly above "
            "chance 0.1 for 10 classes (needs > "
        ), flaw
    # the bar: 3 standard errors of a chance score over 64 images (0.1 + 3 x 0.0375)
    small = State(run_spec=RunSpec(test_samples=64))
    assert "(needs > 0.213)" in run_flaw(ended(small, final_accuracy=0.2))
    assert run_is_clean(ended(State(run_spec=RunSpec(test_samples=64)), final_accuracy=0.25))
    silent = ended(final_accuracy=None)
    assert run_flaw(silent) == (
        "no test:accuracy was reported: cannot tell whether the model beats chance "
        "(0.1 for 10 classes)"
    )
    # a percentage read as printed (PyTorch's MNIST example: "Accuracy: 1000/10000 (10%)"):
    # 10 would pass for far above chance 0.1; it is not judged, and the flaw says the fix
    printed = run_flaw(ended(final_accuracy=10.0))
    assert printed == (
        "test:accuracy 10 is not a fraction between 0 and 1: cannot tell whether the model "
        'beats chance (0.1 for 10 classes); a job printing a percentage: "percent": true '
        "on its metric definition"
    ), printed
    assert run_flaw(ended(final_accuracy=-0.5)) is not None


def test_a_model_whose_test_loss_did_not_fall_learned_nothing_that_holds() -> None:
    """The built-in ReLU job with batch norm at lr 0.1 (the repair benchmark's chance
    case): its training loss fell to 0.26 while its test loss rose to 13.2, past ln 10
    (a uniform guess), and its test accuracy 0.17 passed chance's bar: called clean. A test
    loss (`test:loss`) not clearly below the untrained model's is a flaw and the verdict's
    NotTrained, whatever the accuracy (LeakyReLU on the same job: 0.48, test loss 2.99);
    one clearly below it (the same job on ELU: 0.25) is clean, and without one the
    training loss judges alone."""

    def run(test_loss: float | None) -> State:
        metrics = {"test:accuracy": 0.17} | ({} if test_loss is None else {"test:loss": test_loss})
        return ended(initial_loss=3.03, final_loss=0.26, metrics=metrics)

    for test_loss in (13.19, 2.986, 2.1):
        flaw = run_flaw(run(test_loss))
        assert flaw is not None and flaw.startswith(
            f"the model did not learn what holds on unseen data: its test loss {test_loss:.4g} "
            "is not 10% below the untrained model's 2.303 (ln 10, a uniform guess), while its "
            "training loss fell to 0.26"
        ), flaw
        found = run_verdict_finding(run(test_loss))
        assert found is not None and found.rule == found.rule_class == NOT_TRAINED
    for clean in (0.251, None):
        assert run_flaw(run(clean)) is None, clean
        assert run_verdict_finding(run(clean)) is None


def test_a_script_states_its_baseline() -> None:
    script = {"source_dir": ".", "entry_point": "train.py"}
    plain = State(run_spec=RunSpec.model_validate(script))
    # no classes known: the accuracy is not judged, the measured start is the bar
    assert run_is_clean(ended(plain, final_accuracy=None, initial_loss=4.0, final_loss=2.0))
    stated = State(
        run_spec=RunSpec.model_validate(script | {"untrained_loss": 2.0, "num_classes": 4})
    )
    flaw = run_flaw(ended(stated, initial_loss=4.0, final_loss=1.9, final_accuracy=0.9))
    assert flaw == (
        "the model did not train: final training loss 1.9 is not 10% below the untrained "
        "model's 2 (run_spec.untrained_loss)"
    )
    at_chance = ended(stated, initial_loss=4.0, final_loss=1.0, final_accuracy=0.27)
    assert run_flaw(at_chance) == (
        "the model did not learn: test accuracy 0.27 is not clearly above chance 0.25 for "
        "4 classes (needs > 0.287)"
    )
    assert run_is_clean(ended(stated, initial_loss=4.0, final_loss=1.0, final_accuracy=0.5))


def test_a_model_that_learned_nothing_is_a_finding_the_policy_can_repair() -> None:
    """verdict_finding: only where the figures were there to judge, and the model learned
    nothing; a job that did not report enough is a flaw of its reporting, not repaired."""
    from remedy.records.verdict import run_verdict_finding

    def why(state: State) -> str | None:
        found = run_verdict_finding(state)
        assert found is None or (found.rule == found.rule_class == NOT_TRAINED and found.step == 11)
        return found.message if found else None

    flat = ended(initial_loss=2.30, final_loss=2.25)
    assert why(flat) == run_flaw(flat)
    assert "did not train" in why(flat)
    at_chance = ended(initial_loss=2.30, final_loss=1.2, final_accuracy=0.11)
    assert "did not learn: test accuracy 0.11" in why(at_chance)
    assert why(ended()) is None  # it trained
    assert why(ended(final_loss=None)) is None  # unjudged: no final loss
    assert why(ended(final_accuracy=None)) is None  # unjudged: no accuracy
    assert "no test:accuracy was reported" in run_flaw(ended(final_accuracy=None))
    assert why(ended(outcome=JobStatus.Failed, final_loss=2.3)) is None
    found = ended(final_loss=2.3, findings=[Finding(rule="Overfit")])
    assert why(found) is None  # the rule's finding is repaired


def test_a_loss_still_speeding_up_at_the_end_is_a_finding_the_policy_can_repair() -> None:
    """The descents of benchmarks/repair_quality.py's runs (loss_thirds: the start, a third,
    two thirds, the end): the GPT-style job at 1/1000 of its rate is still gaining pace at
    its end; the same job at its rate, and a healthy long run, slow down."""
    from remedy.records.verdict import run_verdict_finding

    script = State(run_spec=RunSpec(source_dir=".", entry_point="train.py"))
    slow = ended(
        script, initial_loss=5.7, final_loss=4.682, loss_thirds=[5.703, 5.596, 5.265, 4.682]
    )
    found = run_verdict_finding(slow)
    assert found is not None and found.rule == found.rule_class == LEARNING_TOO_SLOWLY
    assert found.message == run_flaw(slow)
    assert "fell 0.583 in the last third of its steps (5.265 -> 4.682), 1.5x or more the 0.331" in (
        found.message
    )
    # the same job at its rate, a healthy long run, and the tiny built-in job stopped early
    # while still descending in a line (tests/flows/test_clean_means_trained.py: 1.16x)
    for healthy in (
        [5.558, 4.032, 2.972, 2.716],
        [5.416, 2.683, 2.301, 2.068],
        [2.653, 1.813, 1.311, 0.731],
    ):
        assert run_is_clean(
            ended(script, initial_loss=5.5, final_loss=healthy[-1], loss_thirds=healthy)
        )
    # a flat end: two drops of noise are no pace either way (under 5 % of the start)
    assert run_is_clean(ended(final_loss=1.3, loss_thirds=[2.3, 1.40, 1.36, 1.30]))
    # success criteria replace the verdict's own judgement
    met = RunSpec(success_criteria=[{"metric": "test:accuracy", "op": ">=", "value": 0.5}])
    judged = ended(
        State(run_spec=met), loss_thirds=[5.7, 5.6, 5.3, 4.7], metrics={"test:accuracy": 0.6}
    )
    assert run_verdict_finding(judged) is None and run_is_clean(judged)


def test_a_loss_speeding_up_while_its_schedule_anneals_the_rate_is_not_held_back() -> None:
    """A tabular classifier (Adam, OneCycleLR) at 10x its intended max_lr trained (val
    accuracy 0.954 against its intended run's 0.958), its loss falling 0.074 in its last
    third after rising 0.016 in its middle one: the anneal's own speed-up, its mean rate
    there a fifth of the middle third's (the step records of that run). The same descent
    under a constant or a rising rate (the GPT-style job whose schedule lifts it) is
    still the finding; without recorded rates (a manual SGD update) too."""
    from remedy.records.verdict import run_verdict_finding

    script = State(run_spec=RunSpec(source_dir=".", entry_point="train.py"))
    thirds = [0.9556, 0.1159, 0.1316, 0.0574]

    def run(rates: list[float]) -> State:
        return ended(
            script, initial_loss=1.38, final_loss=0.0574, loss_thirds=thirds, rate_thirds=rates
        )

    assert run_is_clean(run([0.0234, 0.00491]))  # OneCycle: annealing
    for rates in ([0.03, 0.03], [6e-5, 3e-4], []):  # constant, rising, not recorded
        found = run_verdict_finding(run(rates))
        assert found is not None and found.rule == LEARNING_TOO_SLOWLY, rates
        # its middle third's rise is said as a rise, not "1.5x or more" of a negative drop
        assert (
            "fell 0.0742 in the last third of its steps (0.1316 -> 0.0574), after the "
            "middle third took it up 0.0157 (0.1159 -> 0.1316)" in found.message
        ), found.message


def test_the_rates_of_a_launchs_thirds_are_means_of_its_step_records() -> None:
    from remedy.state_schema.loss_windows import RATE_THIRDS_MIN_STEPS, rate_thirds
    from remedy.strategies.outcomes import step_rates

    assert rate_thirds([0.1] * (RATE_THIRDS_MIN_STEPS - 1)) == []  # too short to tell
    # 40 steps of a one-epoch warmup over 32 updates (an eighth of a 320-update job): rising
    middle, last = rate_thirds([min(1.0, (k + 1) / 32) for k in range(40)])
    assert middle == pytest.approx(20 / 32) and last > middle  # steps 14-26 of 32, then 27-32, 1
    falling: list[float | None] = [1.0 - i / 120 for i in range(120)]
    assert rate_thirds(falling) == pytest.approx([0.5 + 1 / 240, 1 / 6 + 1 / 240])
    falling[100] = None  # a step of the last third without a rate: not known
    assert rate_thirds(falling) == []
    records = [{"type": "step", "learning_rate": 0.1}, {"type": "step"},
               {"type": "epoch"}, {"type": "step", "learning_rate": float("nan")}]  # fmt: skip
    assert step_rates(records) == [0.1, None, None]


def test_the_descent_figures_carry_the_launchs_update_ratio_at_its_typed_rate() -> None:
    """The verdict reads a launch's update ratio as the policy does (launch_update_ratio):
    the median of its step records' figures, each at the rate the launch was given."""
    from remedy.strategies.outcomes import descent_figures

    warmup = [{"type": "step", "learning_rate": 1e-4, "update_ratio": 1e-6}]
    steady = [{"type": "step", "learning_rate": 1e-3, "update_ratio": 1e-5}] * 2
    figures = descent_figures([*warmup, *steady], typed=1e-3)
    assert figures["update_ratio"] == pytest.approx(1e-5)  # the warmup's scaled up to it
    assert descent_figures([{"type": "step", "loss": 1.0}])["update_ratio"] is None


def test_the_thirds_of_a_launch_are_windows_of_its_step_losses() -> None:
    from remedy.state_schema.loss_windows import THIRDS_MIN_STEPS, loss_thirds

    assert loss_thirds([1.0] * (THIRDS_MIN_STEPS - 1)) == []  # too short to tell
    losses: list[float | None] = [float(120 - i) for i in range(120)]
    losses[0] = None  # a non-finite step is left out of its window
    assert loss_thirds(losses) == [115.0, 80.5, 40.5, 5.5]


def undescribed(attempt: Attempt) -> Attempt:
    """A running attempt's descent as its step records would say it: too short to tell."""
    return attempt


def agreeing(attempt: Attempt) -> Attempt:
    """The step records of a run at a rate far too small (the char transformer at 1/1000
    of its rate: 0.95 and 0.95; its loss rose on 0.45 of its steps)."""
    return attempt.model_copy(update={"gradient_agreement": [0.95, 0.95], "loss_rises": 0.45})


def disagreeing(attempt: Attempt) -> Attempt:
    """A rate far too high on its noise floor (the GPT-style job at 100x: -0.06, 0.14)."""
    return attempt.model_copy(update={"gradient_agreement": [-0.06, 0.14], "loss_rises": 0.5})


def on_a_noise_floor(attempt: Attempt) -> Attempt:
    """Disagreeing gradients under a known rate that is not rising (the GPT-style job at
    100x at a quarter: its cosine 0.59 -> 0.56)."""
    return disagreeing(attempt).model_copy(update={"rate_thirds": [0.59, 0.56]})


def warming_up(attempt: Attempt) -> Attempt:
    """Agreeing gradients under a schedule still raising the rate (a warmup)."""
    return agreeing(attempt).model_copy(update={"rate_thirds": [1e-4, 3e-4]})


def test_a_run_of_known_length_is_asked_at_half_whether_it_began_to_learn() -> None:
    """At half its length a cold start whose loss is not 5 % below the untrained model's
    (half the end's 10 %) is found NotTrained there (not at its end); one that learned, one
    learning slowly (7.9 % below: the GPT-style job at 1/30 of its rate), one not yet at
    half, a warm start, a run of unknown or tiny length, and one judged by its criteria
    are not."""
    script = State(run_spec=RunSpec(entry_point="train.py"))
    flat = {"outcome": None, "initial_loss": 5.70, "initial_window_loss": 5.71, "loss_window": 20}
    running = ended(script, steps_run=200, final_window_loss=5.60, **flat)
    found = asked_early(running, 400, undescribed)
    assert found is not None and (found.rule, found.rule_class) == (NOT_TRAINED, NOT_TRAINED)
    assert found.step == 199
    assert found.message == (
        "the model has not begun to learn by update 200, half of the job's 400: its "
        "training loss 5.6 (median of the last 20 steps) is not 5% below the untrained "
        "model's 5.7 (measured: its first step's)"
    ), found.message
    late = ended(script, steps_run=344, final_window_loss=5.6, **flat)  # a look after half
    assert asked_early(late, 344 * 2 - 1, undescribed).message.startswith(  # type: ignore[union-attr]
        "the model has not begun to learn by update 344, past half of the job's 687: "
    )
    assert asked_early(running, None, undescribed) is None  # length not known
    early = ended(script, steps_run=199, final_window_loss=5.6, **flat)
    assert asked_early(early, 400, undescribed) is None
    learned = ended(script, steps_run=200, final_window_loss=5.0, **flat)
    assert asked_early(learned, 400, undescribed) is None
    slowly = ended(script, steps_run=200, final_window_loss=5.7 * (1 - 0.079), **flat)
    assert asked_early(slowly, 400, undescribed) is None
    flat_enough = ended(script, steps_run=200, final_window_loss=5.7 * (1 - 0.045), **flat)
    assert asked_early(flat_enough, 400, undescribed) is not None
    at_its_end = ended(script, steps_run=400, final_window_loss=5.6, **flat)
    assert asked_early(at_its_end, 400, undescribed) is None  # asked when it completes
    tiny = ended(script, steps_run=30, final_window_loss=5.6, **flat)
    assert asked_early(tiny, 60, undescribed) is None
    warm = ended(running, "k", start_step=100, steps_run=200, final_window_loss=5.6, **flat)
    assert asked_early(warm, 400, agreeing) is None
    at_least = [{"metric": "test:accuracy", "op": ">=", "value": 0.9}]
    criteria = State(run_spec=RunSpec(entry_point="train.py", success_criteria=at_least))
    judged = ended(criteria, steps_run=200, final_window_loss=5.6, **flat)
    assert asked_early(judged, 400, agreeing) is None
    # its gradients still agreeing say which way: its rate is far too small
    slow = asked_early(running, 400, agreeing)
    assert slow is not None and slow.rule == slow.rule_class == LEARNING_TOO_SLOWLY
    assert slow.message.startswith(found.message + "; and its gradients still agreed: ")
    assert slow.message.endswith("its learning rate is far too small to move the model")
    assert asked_early(running, 400, disagreeing) == found


def test_a_run_whose_gradients_agree_is_asked_at_a_quarter_of_its_length() -> None:
    """At a quarter, a cold start not 2.5 % below its start (a quarter of the end's 10 %)
    whose gradients still agree is LearningTooSlowly there (the benchmark's runs that
    learned nothing: 0.0-1.1 % below, 0.35-0.95 agreeing); one whose gradients disagree
    under a known rate not rising is NotTrained there (a noise floor: which way is not
    known). Not: gradients that disagree without a recorded rate (a warmup no figure
    shows: asked at half), a schedule still raising the rate (a warmup), a loss already
    2.5 % below (the word LM's intended run: 4.8 %), a quarter under 40 updates, and the
    step records that cannot tell (too few)."""
    script = State(run_spec=RunSpec(entry_point="train.py"))
    flat = {"outcome": None, "initial_loss": 5.70, "initial_window_loss": 5.71, "loss_window": 20}
    quarter = ended(script, steps_run=100, final_window_loss=5.66, **flat)
    found = asked_early(quarter, 400, agreeing)
    assert found is not None and found.rule == found.rule_class == LEARNING_TOO_SLOWLY
    assert found.step == 99
    assert found.message.startswith(
        "the model has not begun to learn by update 100, a quarter of the job's 400: its "
        "training loss 5.66 (median of the last 20 steps) is not 2.5% below the untrained "
        "model's 5.7 (measured: its first step's); and its gradients still agreed: over the "
        "last third of its steps the cosine similarity of consecutive updates' gradients "
        "averaged 0.95, and 0.95 five updates apart"
    ), found.message
    for descent in (disagreeing, warming_up, undescribed):
        assert asked_early(quarter, 400, descent) is None, descent.__name__
    # a rate rising past the one the job was given is no warmup towards it: a cosine
    # decaying up to a floor typed for another rate (the GPT-style job at 1/1000)
    for typed, asked in ((6e-6, True), (4.5e-5, False), (1e-3, False)):
        mapped = RunSpec(
            entry_point="train.py",
            hyperparameters={"learning_rate": typed},
            hyperparameter_roles={"learning_rate": "learning_rate"},
        )
        rising = ended(State(run_spec=mapped), steps_run=100, final_window_loss=5.66, **flat)
        past = asked_early(
            rising, 400, lambda a: agreeing(a).model_copy(update={"rate_thirds": [1.5e-5, 4.6e-5]})
        )
        assert (past is not None) is asked, typed
    floor = asked_early(quarter, 400, on_a_noise_floor)
    assert floor is not None and floor.rule == floor.rule_class == NOT_TRAINED
    assert floor.message == found.message.split("; and its gradients")[0]
    moving = ended(script, steps_run=100, final_window_loss=5.7 * (1 - 0.048), **flat)
    assert asked_early(moving, 400, agreeing) is None
    # before a quarter, the eighth's question (test below); a look past it saw this before
    before = ended(script, steps_run=99, final_window_loss=5.66, **flat)
    assert asked_early(before, 400, agreeing, seen_before=60) is None
    short = ended(script, steps_run=39, final_window_loss=5.66, **flat)
    assert asked_early(short, 156, agreeing) is None  # a quarter of 39 updates
    read: list[str] = []

    def counted(attempt: Attempt) -> Attempt:
        read.append("records")
        return agreeing(attempt)

    assert asked_early(moving, 400, counted) is None and read == []  # the loss says enough


def test_a_run_that_learned_nothing_by_an_eighth_of_its_length_is_asked_there() -> None:
    """At an eighth, the quarter's question with an eighth of the end's 10 % (1.25 %):
    replayed on benchmarks/repair_quality.py's first launches (early_questions.py), the
    runs that learned nothing were -0.7 to 1.0 % below their start there, every healthy or
    intended run 4.0 % or more. An eighth under 40 updates is not asked (a 300-update
    job's 37), nor one a look past it saw before; a loss 1.25 % below goes on to the
    quarter."""
    script = State(run_spec=RunSpec(entry_point="train.py"))
    flat = {"outcome": None, "initial_loss": 5.70, "initial_window_loss": 5.71, "loss_window": 20}
    eighth = ended(script, steps_run=50, final_window_loss=5.66, **flat)
    found = asked_early(eighth, 400, agreeing)
    assert found is not None and found.rule == LEARNING_TOO_SLOWLY and found.step == 49
    assert found.message.startswith(
        "the model has not begun to learn by update 50, an eighth of the job's 400: its "
        "training loss 5.66 (median of the last 20 steps) is not 1.25% below"
    ), found.message
    floor = asked_early(eighth, 400, on_a_noise_floor)
    assert floor is not None and floor.rule == NOT_TRAINED
    past = ended(script, steps_run=60, final_window_loss=5.66, **flat)
    assert "update 60, past an eighth" in (asked_early(past, 400, agreeing) or found).message
    assert asked_early(past, 400, agreeing, seen_before=50) is None  # asked at that look
    assert (
        asked_early(ended(script, steps_run=37, final_window_loss=5.66, **flat), 300, agreeing)
        is None
    )
    learning = ended(script, steps_run=50, final_window_loss=5.7 * (1 - 0.0125), **flat)
    assert asked_early(learning, 400, agreeing) is None
    for descent in (disagreeing, warming_up, undescribed):
        assert asked_early(eighth, 400, descent) is None, descent.__name__
    # a warmup whose updates would still be tiny at its peak is no excuse: a fine-tuning
    # script at 1/1000 of its rate moved its weights 5.4e-6 (scaled to the typed rate)
    for ratio, asked in ((5.4e-6, True), (1e-4, True), (1.1e-4, False), (4.5e-3, False)):

        def tiny(attempt: Attempt, ratio: float = ratio) -> Attempt:
            return warming_up(attempt).model_copy(update={"update_ratio": ratio})

        slow = asked_early(eighth, 400, tiny)
        assert (slow is not None) is asked, ratio
        if slow is not None:
            assert slow.rule == LEARNING_TOO_SLOWLY


def test_a_run_held_at_half_that_learned_is_asked_whether_its_rate_holds_it_back() -> None:
    """Held at half its length (the flow waits), a cold start whose loss moved but whose
    gradients still agree at both lags (the char transformer at 1/30 of its rate: 0.94,
    0.94) is asked STILL_DESCENDING there; one whose gradients disagree at a lag (every
    healthy run: one lag under 0.2), one not held, and one past half (let go on already)
    are not; nor, at a quarter, one agreeing as a healthy run may that early."""
    script = State(run_spec=RunSpec(entry_point="train.py"))
    flat = {"outcome": None, "initial_loss": 5.70, "initial_window_loss": 5.71, "loss_window": 20}
    learning = ended(script, steps_run=200, final_window_loss=4.2, **flat)
    found = asked_early(learning, 400, agreeing, held=True)
    assert found is not None and found.rule == found.rule_class == STILL_DESCENDING
    assert found.step == 199
    assert found.message == (
        "the model learned in the first 200 of the job's 400 updates, but its gradients "
        "still agreed: over the last third of its steps the cosine similarity of "
        "consecutive updates' gradients averaged 0.95, and 0.95 five updates apart (0.2 or "
        "more: the mean gradient still outweighed each batch's noise), as under a learning "
        "rate far too small"
    ), found.message
    healthy = lambda a: a.model_copy(  # noqa: E731
        update={"gradient_agreement": [0.40, -0.20], "loss_rises": 0.45}
    )
    assert asked_early(learning, 400, healthy, held=True) is None
    assert asked_early(learning, 400, agreeing) is None  # not held: nothing waits for probes
    quarter = ended(script, steps_run=100, final_window_loss=4.2, **flat)
    assert asked_early(quarter, 400, healthy, held=True) is None  # at a quarter: the bar is 0.5


def test_a_run_held_at_a_quarter_whose_gradients_still_agree_is_asked_there() -> None:
    """Held at a quarter, a cold start that learned (its loss past the quarter's 2.5 %)
    whose gradients still agree 0.5 or more at both lags (the GPT-style job at 1/30 of its
    rate: 3.1 % down, 0.69/0.67; the VAE at 1/30: 0.80/0.82, far more than 5 % down) is
    asked half's question there; one whose gradients agree as the healthy runs' do that
    early (the char transformer's intended run: 0.21/0.20), one not held, one at an eighth
    and one in a warmup are not."""
    script = State(run_spec=RunSpec(entry_point="train.py"))
    flat = {"outcome": None, "initial_loss": 5.70, "initial_window_loss": 5.71, "loss_window": 20}
    slow = ended(script, steps_run=100, final_window_loss=5.70 * (1 - 0.031), **flat)
    found = asked_early(slow, 400, agreeing, held=True)
    assert found is not None and found.rule == STILL_DESCENDING and found.step == 99
    assert "learned in the first 100 of the job's 400 updates" in found.message
    assert "(0.5 or more: the mean gradient" in found.message  # the quarter's bar, said
    learned = ended(script, steps_run=100, final_window_loss=5.70 * (1 - 0.2), **flat)
    assert asked_early(learned, 400, agreeing, held=True) is not None  # how far: no matter
    for agreed in ([0.21, 0.20], [0.49, 0.9], [0.13, -0.07]):
        like_a_healthy_run = lambda a, agreed=agreed: a.model_copy(  # noqa: E731
            update={"gradient_agreement": agreed, "loss_rises": 0.45}
        )
        assert asked_early(learned, 400, like_a_healthy_run, held=True) is None, agreed
    assert asked_early(slow, 400, agreeing) is None  # not held
    eighth = ended(script, steps_run=50, final_window_loss=5.70 * (1 - 0.02), **flat)
    assert asked_early(eighth, 400, agreeing, held=True) is None
    assert asked_early(slow, 400, warming_up, held=True) is None  # a warmup: asked at half
    # a rate rising past the one the job was given is no warmup towards it: asked
    for typed, asked in ((2e-4, True), (1e-3, False)):
        mapped = RunSpec(
            entry_point="train.py",
            hyperparameters={"learning_rate": typed},
            hyperparameter_roles={"learning_rate": "learning_rate"},
        )
        rising = ended(
            State(run_spec=mapped), steps_run=100, final_window_loss=5.70 * (1 - 0.031), **flat
        )
        past = asked_early(
            rising,
            400,
            lambda a: agreeing(a).model_copy(update={"rate_thirds": [1.5e-4, 2.3e-4]}),
            held=True,
        )
        assert (past is not None) is asked, typed


def test_a_run_held_at_a_quarter_whose_loss_levelled_off_early_is_asked_about_a_lower_rate() -> (
    None
):
    """Held at a quarter, a cold start whose loss fell fast in the first third of its
    updates and then levelled off (the char transformer at 100x its rate, AdamW at 0.1:
    2.71 -> 1.65 -> 1.64 at update 100 of 400), its gradients disagreeing, is asked
    SETTLED_EARLY there; one still falling as a healthy run does a quarter in (the
    VAE's healthy run: 0.10 of its first third's drop; the char transformer's intended
    run 0.34; a regression whose first fall was large, still falling 25 % of its level),
    one not held, one at half, one in a warmup, and one whose thirds are not
    known are not."""
    script = State(run_spec=RunSpec(entry_point="train.py"))
    flat = {"outcome": None, "initial_loss": 2.71, "initial_window_loss": 2.71, "loss_window": 8}
    quarter = ended(script, steps_run=100, final_window_loss=1.64, **flat)

    def thirds(*loss: float) -> Callable[[Attempt], Attempt]:
        return lambda a: on_a_noise_floor(a).model_copy(update={"loss_thirds": list(loss)})

    levelled = thirds(2.71, 1.65, 1.66, 1.64)
    found = asked_early(quarter, 400, levelled, held=True)
    assert found is not None and found.rule == found.rule_class == SETTLED_EARLY
    assert found.step == 99
    assert found.message == (
        "the model's loss fell from 2.71 to 1.65 in the first third of its 100 updates, "
        "then levelled off (1.64 at update 100, 1% of the first third's drop, under 7.5%, "
        "and 0.6% of where it was, under 4%), as on the noise floor of a learning rate far "
        "too high"
    ), found.message
    risen = asked_early(quarter, 400, thirds(2.71, 1.65, 1.66, 1.70), held=True)
    assert risen is not None and risen.rule == SETTLED_EARLY  # rose again: levelled all the same
    # the VAE's healthy run; the char transformer's intended run; a regression on Lion at
    # its best rate, its MSE's first fall the targets' mean learned, falling 25 % of where
    # it is after it (2 % of that first fall)
    healthy_runs = ((37.33, 25.29, 24.6, 24.07), (2.51, 1.80, 1.65, 1.56), (177.6, 10.66, 9, 8.01))
    for healthy in healthy_runs:
        assert asked_early(quarter, 400, thirds(*healthy), held=True) is None, healthy
    assert asked_early(quarter, 400, levelled) is None  # not held: nothing waits for probes
    half = ended(script, steps_run=200, final_window_loss=1.64, **flat)
    assert asked_early(half, 400, levelled, held=True) is None  # its floor wanders by then
    warmup = lambda a: levelled(a).model_copy(update={"rate_thirds": [1e-4, 3e-4]})  # noqa: E731
    assert asked_early(quarter, 400, warmup, held=True) is None
    assert asked_early(quarter, 400, on_a_noise_floor, held=True) is None  # thirds unknown
    # its gradients still agreeing, it is asked the other way
    agreeing_too = lambda a: agreeing(levelled(a))  # noqa: E731
    upward = asked_early(quarter, 400, agreeing_too, held=True)
    assert upward is not None and upward.rule == STILL_DESCENDING


def test_a_run_holds_where_it_is_asked_where_its_length_is_known_before_it_runs() -> None:
    """hold_point, then next_hold_point: an eighth, a quarter and half of a script's stated
    length (its max_steps role, or its num_epochs role times its stated updates_per_epoch;
    the built-in job's own), each share of 40 updates or more, none past half; none for a
    length only the job can measure, a warm start, a probe, or a run judged by its
    criteria."""
    stated = RunSpec(
        entry_point="train.py",
        hyperparameters={"max-steps": 400},
        hyperparameter_roles={"max_steps": "max-steps"},
    )
    assert stated.known_length() == 400 and hold_point(stated) == 50
    assert [next_hold_point(stated, at) for at in (50, 100, 200)] == [100, 200, None]
    assert next_hold_point(stated, 60) == 100  # the next point past any update
    epochs = RunSpec(
        entry_point="train.py",
        hyperparameters={"epochs": 4},
        hyperparameter_roles={"num_epochs": "epochs"},
        updates_per_epoch=86,
    )
    assert hold_point(epochs) == 43  # an eighth of 344
    measured = epochs.model_copy(update={"updates_per_epoch": None})
    assert measured.known_length() is None and hold_point(measured) is None
    assert next_hold_point(measured, 86) is None  # its length not known to the flow
    assert next_hold_point(measured, 86, epoch_updates=86) == 172  # as its job measured it
    assert next_hold_point(measured, 172, epoch_updates=86) is None  # half: its last hold
    assert measured.known_length(measured_epoch=86) == 344
    builtin = RunSpec()
    length = builtin.num_epochs * builtin.steps_per_epoch
    assert hold_point(builtin) == min(p for p in (length // 8, length // 4, length // 2) if p >= 40)
    short = RunSpec(
        entry_point="train.py",
        hyperparameters={"max-steps": 79},
        hyperparameter_roles={"max_steps": "max-steps"},
    )
    assert hold_point(short) is None  # half is 39 updates
    quarter_first = RunSpec(
        entry_point="train.py",
        hyperparameters={"max-steps": 200},
        hyperparameter_roles={"max_steps": "max-steps"},
    )
    assert hold_point(quarter_first) == 50  # its eighth, 25 updates, is not asked
    assert next_hold_point(quarter_first, 50) == 100
    for other in (
        stated.model_copy(update={"init_checkpoint": "/ckpt"}),
        stated.model_copy(update={"max_updates": 25}),
        stated.model_copy(
            update={"success_criteria": [{"metric": "test:accuracy", "op": ">=", "value": 0.9}]}
        ),
    ):
        assert hold_point(other) is None and next_hold_point(other, 50) is None


def test_a_model_that_learned_nothing_while_its_gradients_agreed_learned_too_slowly() -> None:
    """At its end, a run that learned nothing and whose gradients still agreed over its
    last third (the word LM at 1/1000 of its rate, 90 updates: 0.61, 0.59) is
    LearningTooSlowly: the repair raises the rate, not probes both ways."""
    state = State(run_spec=RunSpec(source_dir=".", entry_point="train.py"))
    flat = {"initial_loss": 5.70, "final_loss": 5.69, "loss_rises": 0.45}
    found = run_verdict_finding(ended(state, gradient_agreement=[0.61, 0.59], **flat))
    assert found is not None and found.rule == LEARNING_TOO_SLOWLY
    assert found.message.startswith("the model did not train: final training loss 5.69 ")
    assert "averaged 0.61, and 0.59 five updates apart" in found.message
    unknown = run_verdict_finding(ended(state, gradient_agreement=[0.61, 0.1], **flat))
    assert unknown is not None and unknown.rule == NOT_TRAINED


def test_a_model_that_learned_nothing_with_tiny_updates_learned_too_slowly() -> None:
    """A run that learned nothing while its updates moved the weights a tenth of a healthy
    run's 1e-3 of themselves or less is LearningTooSlowly even where its gradients disagree
    (examples/digits at 1/1000 of its rate, Adadelta under dropout: 1.7e-5, its gradients
    0.13 and 0.18): the repair raises the rate, not probes both ways. Large updates (a
    rate far too high on its noise floor: the GPT-style job at 100x, 0.032) leave the
    direction unknown, and so does a ratio not measured."""
    state = State(run_spec=RunSpec(source_dir=".", entry_point="train.py"))
    flat = {"initial_loss": 2.30, "final_loss": 2.31, "loss_rises": 0.45}
    disagreeing = {"gradient_agreement": [0.13, 0.18]}
    found = run_verdict_finding(ended(state, update_ratio=1.7e-5, **disagreeing, **flat))
    assert found is not None and found.rule == found.rule_class == LEARNING_TOO_SLOWLY
    assert found.message.endswith(
        "; and its updates moved the weights 1.7e-05 of themselves (median per update), "
        "0.0001 or less, a tenth of a healthy run's 0.001: its learning rate is far too "
        "small to move the model"
    ), found.message
    for ratio in (0.032, 2e-4, None):
        other = run_verdict_finding(ended(state, update_ratio=ratio, **disagreeing, **flat))
        assert other is not None and other.rule == NOT_TRAINED, ratio
    # a model at chance with tiny updates, its classes known, is too slow as well
    classes = State(run_spec=RunSpec(source_dir=".", entry_point="train.py", num_classes=10))
    trained_loss = {"initial_loss": 2.30, "final_loss": 1.5, "loss_rises": 0.45}
    chance = ended(classes, update_ratio=5e-5, metrics={"test:accuracy": 0.1}, **trained_loss)
    slow = run_verdict_finding(chance)
    assert slow is not None and slow.rule == LEARNING_TOO_SLOWLY, slow


def test_gradients_still_agreeing_at_the_end_are_asked() -> None:
    """A loss that slowed as a converged run's does, but gradients that still agreed over
    the last third (benchmarks/gradient_agreement.py: the char transformer at 1/30 of its
    rate, 0.91 and 0.91 a lag of 1 and of 5 apart) is the verdict's open question, asked as
    a descent in a line is. Intended runs agree at one lag at most (the VAE: 0.35, -0.35;
    the char transformer: 0.22, -0.28; the word LM: -0.10, -0.03), and are not asked."""
    from remedy.records.verdict import AGREEING

    slowing = [4.17, 2.61, 2.38, 2.21]  # the last third's drop well under the middle one's

    def run(agreement: list[float], loss_rises: float | None = 0.45, **spec: object) -> State:
        state = State(run_spec=RunSpec(source_dir=".", entry_point="train.py", **spec))
        return ended(
            state,
            loss_rises=loss_rises,
            initial_loss=4.2,
            final_loss=2.21,
            loss_thirds=slowing,
            gradient_agreement=agreement,
            metrics={"test:accuracy": 0.6},
        )

    found = run_verdict_finding(run([0.91, 0.91]))
    assert found is not None and found.rule == found.rule_class == STILL_DESCENDING
    assert run_flaw(run([0.91, 0.91])) is None  # a question: unanswered, the run is clean
    assert "its gradients still agreed when the run ended" in found.message
    assert "averaged 0.91, and 0.91 five updates apart" in found.message
    for healthy in ([0.35, -0.35], [0.22, -0.28], [-0.10, -0.03], [AGREEING - 0.01, 0.9], []):
        assert run_verdict_finding(run(healthy)) is None, healthy
    # noisy batches (the loss rose on 0.38-0.56 of the last third's steps in every
    # mini-batch run of the repair benchmark): asked; a full batch descending smoothly
    # (examples/moons: 0.02) agrees near its minimum too, and is not
    assert run_verdict_finding(run([0.91, 0.91], loss_rises=0.38)) is not None
    assert run_verdict_finding(run([0.44, 0.51], loss_rises=0.02)) is None
    assert run_verdict_finding(run([0.91, 0.91], loss_rises=None)) is None  # too short to tell
    # success criteria replace the verdict's own judgement; without probes it is not asked
    met = [{"metric": "test:accuracy", "op": ">=", "value": 0.5}]
    assert run_verdict_finding(run([0.91, 0.91], success_criteria=met)) is None
    unprobed = run([0.91, 0.91]).model_copy(update={"budgets": Budgets(probe_steps=0)})
    assert run_verdict_finding(unprobed) is None


def test_a_classifier_that_fit_its_data_is_not_asked_whether_its_rate_held_it_back() -> None:
    """A classifier whose final training loss is 5 % or less of its untrained loss has fit
    its training data (a BERT-style classifier under the Hugging Face Trainer: 0.69 ->
    1e-4, accuracy 1.0; 2.1 % at half its length); its gradients agree (0.99 at both lags:
    every sample fit, each batch's gradient grows the same margins), but a higher rate has
    nothing left to win: it is not asked, at its end nor where it is held. One at 10 % of
    it, or whose classes are not known (a regression's floor is not 0), is asked as
    before."""

    def run(final: float, num_classes: int | None = 2, **fields: object) -> State:
        spec = RunSpec(source_dir=".", entry_point="train.py", num_classes=num_classes)
        return ended(
            State(run_spec=spec),
            loss_rises=0.45,
            initial_loss=0.69,
            initial_window_loss=0.69,
            final_loss=final,
            final_window_loss=final,
            loss_thirds=[0.69, 0.2, final + 0.002, final],  # slowed as a converged run does
            gradient_agreement=[0.99, 0.99],
            metrics={"test:accuracy": 1.0},
            **fields,
        )

    assert run_verdict_finding(run(1e-4)) is None
    assert run_flaw(run(1e-4)) is None  # clean
    assert run_verdict_finding(run(0.034)) is None  # 4.9 %
    for asked in (run(0.069), run(1e-4, num_classes=None)):
        found = run_verdict_finding(asked)
        assert found is not None and found.rule == STILL_DESCENDING, asked.run_spec.num_classes
    # held at a quarter, fit already: not asked there either
    quarter = run(1e-4, outcome=None, steps_run=100)
    assert asked_early(quarter, 400, agreeing, held=True) is None
    unknown = run(1e-4, num_classes=None, outcome=None, steps_run=100)
    assert asked_early(unknown, 400, agreeing, held=True) is not None


def test_a_run_whose_schedule_was_still_raising_the_rate_at_its_end_is_asked() -> None:
    """The GPT-style job at 1/30 of its rate (benchmarks/repair_quality.py, three times its
    length): its cosine decays *up* from the typed 2e-4 to the floor of 6e-4 typed for the
    intended 6e-3, so its last third's mean rate is 1.43x its middle third's. Its loss
    slowed as a converged run's does and its gradients agreed at one lag only (0.26,
    -0.17): once called clean at 7 % above its intended run's loss. Asked now. Constant,
    annealed and unrecorded rates are not."""
    from remedy.records.verdict import RISING

    slowing = [5.7, 3.9, 3.45, 3.2]

    def run(rates: list[float]) -> State:
        state = State(run_spec=RunSpec(source_dir=".", entry_point="train.py"))
        return ended(
            state,
            loss_rises=0.45,
            initial_loss=5.7,
            final_loss=3.2,
            loss_thirds=slowing,
            rate_thirds=rates,
            gradient_agreement=[0.26, -0.17],
        )

    found = run_verdict_finding(run([3.95e-4, 5.64e-4]))
    assert found is not None and found.rule == found.rule_class == STILL_DESCENDING
    assert "its learning rate was still rising when the run ended: 0.000564 on average" in (
        found.message
    )
    assert "1.43x the middle third's 0.000395" in found.message
    assert run_flaw(run([3.95e-4, 5.64e-4])) is None  # a question: unanswered, clean
    for healthy in ([0.1, 0.1], [3.37e-3, 1.08e-3], [1e-3, RISING * 1e-3 * 0.99], [0.0, 1e-3], []):
        assert run_verdict_finding(run(healthy)) is None, healthy


def test_how_often_the_loss_rose_over_the_last_third() -> None:
    """Told from ten pairs of the last third's losses or more: a launch held at half of 90
    updates (45: 14 pairs) is told, one of 30 (9 pairs) is not."""
    from remedy.state_schema.loss_windows import rising_share

    smooth = [1 / (1 + step) for step in range(90)]
    assert rising_share(smooth) == 0.0
    noisy = [1 / (1 + step) + (0.1 if step % 2 else 0.0) for step in range(90)]
    assert rising_share(noisy) == 15 / 29  # the odd steps of the last third rise
    assert rising_share([None, *noisy[1:]]) == 15 / 29  # the first third does not count
    assert rising_share(noisy[:45]) == 7 / 14
    assert rising_share(noisy[:30]) is None  # too short to tell
    assert rising_share([x if i % 3 else None for i, x in enumerate(noisy[:45])]) is None
    assert rising_share([None] * 90) is None


def test_a_run_at_half_that_would_end_short_at_its_pace_is_asked_there() -> None:
    """At half its length, past half's 5 % but not the end's 10 %, a launch whose loss,
    falling on at its pace over the last two thirds of what it ran, would end short of 10 %
    below the untrained model's is found there (the spirals classifier at 1/30 of its rate
    at update 180: thirds 1.095, 1.013, 1.019, 1.008; asked only at its end, it ran all
    360). One falling fast enough, one whose rate a schedule moves (it may speed up as the
    rate anneals) and one whose rate is unknown are left to go on."""
    script = State(run_spec=RunSpec(entry_point="train.py"))
    flat = {"outcome": None, "initial_loss": 1.12, "initial_window_loss": 1.083, "loss_window": 20}
    running = ended(script, steps_run=180, final_window_loss=1.0, **flat)

    def descending(thirds: list[float], rates: list[float]) -> Callable[[Attempt], Attempt]:
        return lambda a: a.model_copy(
            update={"loss_thirds": thirds, "rate_thirds": rates, "gradient_agreement": [0.1, 0.0]}
        )

    slow = descending([1.095, 1.013, 1.019, 1.008], [3.3e-4, 3.3e-4])
    found = asked_early(running, 360, slow)
    assert found is not None and found.rule == NOT_TRAINED and found.step == 179
    assert found.message == (
        "the model learns too slowly to train by the end of the job's 360 updates: its loss "
        "fell 0.005 over the last two thirds of its 180 updates (to 1.008); at that pace it "
        "would end at 1.001, not 10% below the untrained model's 1.083 (measured: the median "
        "of its first 20 steps)"
    ), found.message
    # asked once: a later look past half reads no records again for it
    assert asked_early(running, 360, slow, seen_before=180) is None
    fast = descending([1.095, 1.06, 1.04, 1.008], [3.3e-4, 3.3e-4])  # -> 0.934: past the bar
    assert asked_early(running, 360, fast) is None
    assert asked_early(running, 360, descending([1.095, 1.013, 1.019, 1.008], [1.0, 0.8])) is None
    assert asked_early(running, 360, descending([1.095, 1.013, 1.019, 1.008], [])) is None
