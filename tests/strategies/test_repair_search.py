"""The adaptive policy learns from the run's attempts: outcomes classified, the learning
rate searched as a bracket, no-effect strategies not repeated, findings repaired by their
rule's class, clipping set from the job's own gradient norms."""

from __future__ import annotations

import math

import pytest

from remedy.debugger import RULES
from remedy.decisions.plan import plan_next
from remedy.state_schema import (
    NOT_TRAINED,
    Attempt,
    Finding,
    NextAction,
    ResultKind,
    RunSpec,
    State,
)
from remedy.state_schema.transitions import begin_attempt, update_current_attempt
from remedy.strategies import Checkpoint
from remedy.strategies.outcomes import TROUBLE, Trouble, classify, digest, rate_on_its_ramp
from remedy.strategies.search_lr import bracket

# Rule classes with no training pathology of their own: input checks and summaries.
NOT_A_PATHOLOGY = {
    "AllZero",
    "CheckInputImages",
    "ClassImbalance",
    "Confusion",
    "SimilarAcrossRuns",
    "TensorVariance",
}


def script(lr: float, clip: float | None = None) -> RunSpec:
    flags: dict[str, float | None] = {"lr": lr}
    roles = {"learning_rate": "lr"}
    if clip is not None:
        flags["clip"], roles["grad_clip_norm"] = clip, "clip"
    return RunSpec.model_validate(
        {"entry_point": "main.py", "hyperparameters": flags, "hyperparameter_roles": roles}
    )


def launched(spec: RunSpec) -> State:
    return begin_attempt(State(policy="adaptive", run_spec=spec), "job-1")


def ended(state: State, finding: Finding | None, **fields: object) -> State:
    """The current attempt ended with this finding (None: it completed)."""
    state = update_current_attempt(state, findings=[finding] if finding else [], **fields)
    return state.model_copy(update={"findings": [finding] if finding else []})


def relaunch(state: State, n: int) -> State:
    return begin_attempt(state, f"job-{n}")


def diverged(step: int) -> Finding:
    return Finding(rule="DivergingLoss", rule_class="DivergingLoss", step=step)


def stalled(step: int = 30) -> Finding:
    return Finding(rule="TinyUpdates", rule_class="TinyUpdates", step=step)


def lr_of(state: State) -> float:
    return float(state.run_spec.role("learning_rate"))


def test_cuts_continue_while_each_one_moves_the_failure_later() -> None:
    # the word-level LM at --lr 20 without clipping: NaN at update 3, at 2 at update 6
    state = plan_next(launched(script(20)), [diverged(2)])
    assert state.planned_change.strategy == "search_lr_down" and lr_of(state) == 2.0
    state = plan_next(relaunch(state, 2), [diverged(5)])  # later: cut again
    assert state.planned_change.strategy == "search_lr_down"
    assert lr_of(state) == pytest.approx(0.2)
    assert "too high at >= 2" in state.planned_change.reason
    first, second = state.history.attempts
    assert (first.result.kind, first.result.update) == (ResultKind.diverged, 3)
    assert (second.result.kind, second.result.update) == (ResultKind.diverged, 6)


def warmup_records(typed: float, warmup: int, losses: list[float]) -> list[dict[str, object]]:
    """Step records of a launch under a linear warmup to `typed` over `warmup` updates."""
    rates = [typed * min(1.0, (k + 1) / (warmup + 1)) for k in range(len(losses))]
    return [
        {"type": "step", "step": k + 1, "loss": loss, "learning_rate": rate}
        for k, (loss, rate) in enumerate(zip(losses, rates, strict=True))
    ]


def diverged_on_a_ramp(typed: float, warmup: int, losses: list[float], onset: int) -> State:
    """A launch at `typed` under a linear warmup of `warmup` updates, found diverging at
    step `onset` (the hook's, from 0), planned (no probes)."""
    state = launched(script(typed))
    records = warmup_records(typed, warmup, losses)
    found = diverged(onset)
    state = update_current_attempt(state, findings=[found])
    state = update_current_attempt(state, **digest(state.current_attempt, records))
    return plan_next(state.model_copy(update={"findings": [found]}))


def test_a_divergence_on_a_warmups_ramp_closes_the_bracket_at_the_rate_it_ran_at() -> None:
    # A fine-tuning-style script typed 2500x too hot, warming up over 120 updates: its
    # loss blew up at update 10, where its schedule had taken the rate to 4.13 of the 50
    # typed. Any typed rate above 4.13 would reach it: the bracket closes there, not at 50.
    losses = [2.33, 2.33, 2.15, 2.18, 2.75, 2.26, 6.7, 13.8, 85.7, 230.6, 3930.0]
    state = diverged_on_a_ramp(50, 120, losses, onset=9)
    (first,) = state.history.attempts
    assert first.ramp_rate == pytest.approx(4.13)
    assert first.result.summary == (
        "diverged at update 10 (DivergingLoss), on its schedule's ramp at a rate of 4.13"
    )
    assert state.planned_change.strategy == "search_lr_down"
    assert lr_of(state) == pytest.approx(0.413)
    assert "too high at >= 4.13" in state.planned_change.reason
    # late on its ramp (update 105 of 120): 0.434, near the peak of 0.5
    state = diverged_on_a_ramp(0.5, 120, [2.3] * 104 + [40.0], onset=104)
    assert state.history.attempts[0].ramp_rate == pytest.approx(0.434)
    assert lr_of(state) == pytest.approx(0.0434)


def on_its_ramp(probe: Attempt, typed: float, updates: int, warmup: int, loss: float) -> Attempt:
    """A probe at `typed` that trained `updates` of a linear warmup of `warmup` to `loss`,
    its rate still rising at its bound."""
    bound = probe.spec.model_copy(update={"max_updates": updates})
    reached = typed * updates / (warmup + 1)
    fields = {"outcome": "Stopped", "steps_run": updates, "final_loss": loss, "spec": bound}
    return probe.model_copy(update=fields | {"ramp_rate": float(f"{reached:.3g}")})


def ramp_probes(
    state: State, losses: tuple[float, ...], warmup: int = 120, updates: int = 25
) -> list[Attempt]:
    """The probes the plan holds (state.probes), each trained `updates` of a linear warmup of
    `warmup` to its loss of `losses` (on_its_ramp)."""
    from remedy.strategies.probes import probe_attempt

    made = [probe_attempt(c, f"p-{i}") for i, c in enumerate(state.probes)]
    rates = [c.run_spec.script_hyperparameters["lr"] for c in state.probes]
    return [
        on_its_ramp(p, r, updates, warmup, x) for p, r, x in zip(made, rates, losses, strict=True)
    ]


def test_a_probe_still_on_its_ramp_gives_way_to_the_highest_rate_seen_to_hold() -> None:
    # the script typed 1000x too hot (20) diverged at update 14, on its ramp at 2.31: its
    # probes of 25 updates at 0.231, 0.0231 and 0.00231 all run on their ramp, where the
    # highest learns fastest. 0.231 reached 0.0477 (0.0239 held for half its updates) and
    # would diverge at its peak (its run did, at update 129); 0.0231, which trains to the
    # intended run's accuracy, is the highest rate seen to hold.
    from remedy.strategies.probes import keep_probes

    state = diverged_on_a_ramp(20, 120, [2.3] * 13 + [90.0], onset=13)
    state = plan_next(state.model_copy(update={"probes": []}), [diverged(13)], probing=True)
    rates = [c.run_spec.script_hyperparameters["lr"] for c in state.probes]
    assert rates == pytest.approx([0.231, 0.0231, 0.00231])
    losses = (1.6, 2.1, 2.3)
    probes = ramp_probes(state, losses)
    kept = keep_probes(state, probes)
    assert lr_of(kept) == pytest.approx(0.0231)
    assert "the highest rate seen to hold; those above ran on their ramp" in (
        kept.planned_change.reason
    )
    assert "still on its schedule's ramp (at 0.0477)" in kept.planned_change.reason
    # where the probes got past their ramp, the lowest loss wins as before
    past = [p.model_copy(update={"ramp_rate": None}) for p in probes]
    assert lr_of(keep_probes(state, past)) == pytest.approx(0.231)
    # and so it does where their ramp reached half their rate or more (a warmup of 30
    # updates: 25 reach 0.81 of it), their peak at most twice what they ran at
    near = ramp_probes(state, losses, warmup=30)
    assert near[0].ramp_rate == pytest.approx(0.186)
    assert lr_of(keep_probes(state, near)) == pytest.approx(0.231)


def test_a_ramp_probe_a_lower_rate_out_learned_shows_no_rate_to_hold() -> None:
    # The script typed 1000x too cold (2e-5) stalled, its updates 5.4e-6 of its weights:
    # probes up of 25 updates on its 120-update warmup at 0.02, 0.2 and 2. 0.2 learned
    # fastest (reached 0.0413); 2 reached 0.413 but ended above 0.2's loss, so its ramp
    # shows nothing held. Half of 0.413 would have let 0.2 go on, which diverged past
    # its peak; half of 0.0413 keeps 0.02, the intended rate.
    from remedy.strategies.probes import keep_probes

    state = ended(launched(script(2e-5)), stalled(199), update_ratio=5.4e-6)
    state = plan_next(state, probing=True)
    rates = [c.run_spec.script_hyperparameters["lr"] for c in state.probes]
    assert rates == pytest.approx([0.02, 0.2, 2.0])
    probes = ramp_probes(state, (2.288, 1.954, 2.008))
    kept = keep_probes(state, probes)
    assert lr_of(kept) == pytest.approx(0.02)
    # had 2 learned fastest of the three, half its ramp's 0.413 would hold 0.2
    faster = [*probes[:2], probes[2].model_copy(update={"final_loss": 1.9})]
    assert lr_of(keep_probes(state, faster)) == pytest.approx(0.2)


def test_only_a_rate_still_rising_below_the_typed_one_is_a_ramp() -> None:
    assert rate_on_its_ramp([0.1, 0.2, 0.3], 1.0) == pytest.approx(0.3)  # a warmup
    assert rate_on_its_ramp([0.04, 0.05, None, 0.09], 1.0) == pytest.approx(0.09)  # OneCycle
    assert rate_on_its_ramp([0.5, 0.5, 0.5], 1.0) is None  # flat: a rate scaled by the script
    assert rate_on_its_ramp([0.1, 0.1, 1.0, 1.0], 1.0) is None  # the built-in's warmup epoch done
    assert rate_on_its_ramp([1.0, 0.9, 0.8], 1.0) is None  # a decay
    assert rate_on_its_ramp([None, None], 1.0) is None  # no optimizer rate recorded
    assert rate_on_its_ramp([0.1, 0.2], None) is None  # no learning_rate role
    # a launch with no ramp: its bracket closes at its typed rate, as before
    state = launched(script(20))
    flat = [{"type": "step", "loss": 5.0, "learning_rate": 20.0}] * 4
    state = update_current_attempt(state, findings=[diverged(2)])
    assert digest(state.current_attempt, flat)["ramp_rate"] is None


def test_a_cut_that_does_not_move_the_failure_later_ends_the_search() -> None:
    state = plan_next(launched(script(20)), [diverged(2)])
    state = plan_next(relaunch(state, 2), [diverged(2)])  # the same update: no progress
    assert state.next_action is NextAction.end or state.planned_change.strategy != (
        "search_lr_down"
    )


def test_a_plateau_after_a_cut_never_goes_back_to_a_rate_that_diverged() -> None:
    # a char-level model at 1000x its rate: cut 10x, then a plateau rule fires: the rate
    # moves off the plateau, but never back up to 1.0, which diverged
    state = plan_next(launched(script(1.0)), [diverged(8)])
    assert lr_of(state) == pytest.approx(0.1)
    plateau = [Finding(rule="Plateau", rule_class="LossNotDecreasing", step=900)]
    moved = plan_next(relaunch(state, 2), plateau)
    assert moved.planned_change.strategy == "search_lr_plateau"
    assert lr_of(moved) == pytest.approx(0.01)
    assert moved.history.attempts[1].result.kind is ResultKind.plateaued
    # probed, it looks both ways, but up (1.0) is outside the bracket: only rates below
    probed = plan_next(relaunch(state, 2), plateau, probing=True)
    rates = sorted(p.run_spec.script_hyperparameters["lr"] for p in probed.probes)
    assert rates == pytest.approx([0.001, 0.01])


def test_a_plateau_closes_no_end_of_the_bracket_and_probes_both_ways() -> None:
    # a tiny GPT on Adam at 100x its rate sits on a noise floor as flat as a crawl
    plateau = [Finding(rule="LossNotDecreasing", rule_class="LossNotDecreasing", step=200)]
    probed = plan_next(launched(script(0.6)), plateau, probing=True)
    rates = sorted(p.run_spec.script_hyperparameters["lr"] for p in probed.probes)
    assert rates == pytest.approx([0.006, 0.06, 6.0, 60.0])
    found = bracket(probed.history.attempts)
    assert (found.low, found.high) == (None, None)
    # its updates measured large (the GPT at 100x: 0.032): both ways still
    large = ended(launched(script(0.6)), plateau[0], update_ratio=0.032)
    probed = plan_next(large, plateau, probing=True)
    rates = sorted(p.run_spec.script_hyperparameters["lr"] for p in probed.probes)
    assert rates == pytest.approx([0.006, 0.06, 6.0, 60.0])
    # its updates measured smaller than a healthy run's (1e-3): a rate too high would
    # move the weights more, so only up, 10x and 100x; nothing passed over (only a search
    # up from a stall passes any)
    for ratio in (1e-6, 9.3e-4):
        small = ended(launched(script(0.6)), plateau[0], update_ratio=ratio)
        probed = plan_next(small, plateau, probing=True)
        rates = sorted(p.run_spec.script_hyperparameters["lr"] for p in probed.probes)
        assert rates == pytest.approx([6.0, 60.0])
        assert not any("passed over" in p.reason for p in probed.probes)
        assert all(
            f"not lowered: at 0.6 an update moved the weights {ratio:.2g} of themselves, "
            "under a healthy run's 0.001" in p.reason
            for p in probed.probes
        )
        unprobed = plan_next(small, plateau)
        assert unprobed.run_spec.script_hyperparameters["lr"] == pytest.approx(6.0)


def test_a_model_that_learned_nothing_is_repaired_as_a_plateau() -> None:
    """The verdict's own finding (no rule fired, the loss did not fall): a rate far too
    small crawls, one far too high sits on a noise floor; probes look both ways."""
    learned_nothing = Finding(rule=NOT_TRAINED, rule_class=NOT_TRAINED, step=89)
    probed = plan_next(launched(script(0.02)), [learned_nothing], probing=True)
    rates = sorted(p.run_spec.script_hyperparameters["lr"] for p in probed.probes)
    assert rates == pytest.approx([0.0002, 0.002, 0.2, 2.0])
    assert probed.history.attempts[0].result.kind is ResultKind.plateaued


def test_a_run_still_speeding_up_at_its_end_is_repaired_as_a_stall_from_a_cold_start() -> None:
    """The verdict's other finding: the rate held the run back, so it goes up only (10x,
    100x, 1000x when probed), and nothing of the slow run is kept."""
    from remedy.state_schema import LEARNING_TOO_SLOWLY

    slow = Finding(rule=LEARNING_TOO_SLOWLY, rule_class=LEARNING_TOO_SLOWLY, step=399)
    end_checkpoint = Checkpoint(path="/ckpt/400", epoch=0, step=400)
    probed = plan_next(launched(script(6e-6)), [slow], [end_checkpoint], probing=True)
    rates = sorted(p.run_spec.script_hyperparameters["lr"] for p in probed.probes)
    assert rates == pytest.approx([6e-5, 6e-4, 6e-3])
    assert all(p.run_spec.init_checkpoint is None for p in probed.probes)
    assert probed.history.attempts[0].result.kind is ResultKind.stalled
    relaunched = plan_next(launched(script(6e-6)), [slow], [end_checkpoint])
    assert relaunched.planned_change.strategy == "search_lr_up"
    assert lr_of(relaunched) == pytest.approx(6e-5) and relaunched.run_spec.init_checkpoint is None


def test_stalls_raise_the_rate_tenfold_until_a_rate_diverges_then_bisect() -> None:
    state = plan_next(launched(script(1e-6)), [stalled()])
    assert state.planned_change.strategy == "search_lr_up" and lr_of(state) == pytest.approx(1e-5)
    state = plan_next(relaunch(state, 2), [stalled()])
    assert lr_of(state) == pytest.approx(1e-4)
    state = plan_next(relaunch(state, 3), [diverged(4)])  # 1e-4 diverged: between
    assert lr_of(state) == pytest.approx(math.sqrt(1e-5 * 1e-4))
    found = bracket(state.history.attempts)
    assert (found.low, found.high) == (pytest.approx(1e-5), pytest.approx(1e-4))


def test_a_stall_whose_updates_were_measured_skips_the_rates_still_too_small() -> None:
    """An update ratio of 2e-6 at 1e-6 (in proportion to the rate: 2e-4 at 1e-4, under a
    healthy run's 1e-3) passes over 1e-5 and 1e-4: the probes start at 1e-3, and say why."""
    state = ended(launched(script(1e-6)), stalled(), update_ratio=2e-6)
    state = plan_next(state, [stalled()], probing=True)
    rates = [p.run_spec.script_hyperparameters["lr"] for p in state.probes]
    assert rates == pytest.approx([1e-3, 1e-2, 1e-1])
    reason = state.probes[0].reason
    assert "0.0001 and below passed over: at 1e-06 an update moved the weights 2e-06 of " in (
        reason
    )
    assert "0.0002 at 0.0001, under a healthy run's 0.001" in reason
    # measured at a healthy size, or not at all: one STEP, as before
    for figure in (5e-3, None):
        state = ended(launched(script(1e-6)), stalled(), update_ratio=figure)
        state = plan_next(state, [stalled()])
        assert lr_of(state) == pytest.approx(1e-5)
        assert state.planned_change is not None
        assert "passed over" not in state.planned_change.reason
    # 1.1e-4: 10x is 1.1e-3, healthy already, so nothing is passed over
    state = plan_next(ended(launched(script(1e-6)), stalled(), update_ratio=1.1e-4), [stalled()])
    assert lr_of(state) == pytest.approx(1e-5)


def test_a_bracket_decades_wide_is_cut_from_the_end_that_failed_not_bisected() -> None:
    """Stalled at 1e-7, then (raised) diverged at 0.01 after training well: the middle,
    3e-5, lies three decades from the rate that learned; the cut steps from 0.01. A
    narrower bracket is still bisected."""
    state = plan_next(launched(script(1e-7)), [stalled()])
    state = update_current_attempt(relaunch(state, 2), spec=script(0.01))
    state = plan_next(state.model_copy(update={"run_spec": script(0.01)}), [diverged(137)])
    assert state.planned_change is not None
    assert state.planned_change.strategy == "search_lr_down"
    assert lr_of(state) == pytest.approx(1e-3)
    assert "so far too low at <= 1e-07, too high at >= 0.01" in state.planned_change.reason
    probed = plan_next(state.model_copy(update={"run_spec": script(0.01)}), [], probing=True)
    rates = sorted(p.run_spec.script_hyperparameters["lr"] for p in probed.probes)
    assert rates == pytest.approx([10**-3.5, 1e-3, 10**-2.5])
    # 30x wide: the middle, not a tenth of the end that failed
    state = plan_next(launched(script(1e-4)), [stalled()])
    state = update_current_attempt(relaunch(state, 2), spec=script(3e-3))
    state = plan_next(state.model_copy(update={"run_spec": script(3e-3)}), [diverged(9)])
    assert lr_of(state) == pytest.approx(math.sqrt(1e-4 * 3e-3))


def test_no_value_that_failed_in_a_direction_is_proposed_again() -> None:
    state = launched(script(0.3))
    tried: list[tuple[float, str]] = []
    for n, finding in enumerate([diverged(3), stalled(), diverged(3), stalled(), stalled()]):
        tried.append((lr_of(state), "down" if finding.rule == "DivergingLoss" else "up"))
        state = plan_next(state, [finding])
        if state.next_action is NextAction.end:
            break
        rate = lr_of(state)
        for old, direction in tried:
            # below every rate found too high, above every rate found too low
            assert rate < old if direction == "down" else rate > old
        state = relaunch(state, n + 2)


def test_a_strategy_that_had_no_effect_is_not_repeated() -> None:
    # clipping far above every gradient norm the job has: the relaunch repeats the curve
    trace = [5.3, 5.1, 4.9, math.nan, None]
    trace = [None if x is None or math.isnan(x) else x for x in trace]
    config = {"DivergingLoss": [{"strategy": "clip_gradients", "max_times": 3}]}
    state = State(policy="adaptive", run_spec=script(20, clip=1e9), policy_config=config)
    state = ended(begin_attempt(state, "job-1"), diverged(3), loss_trace=trace)
    state = plan_next(state)
    assert state.planned_change.strategy == "clip_gradients"
    state = ended(relaunch(state, 2), diverged(3), loss_trace=trace)
    state = plan_next(state)
    second = state.history.attempts[1]
    assert second.result.kind is ResultKind.no_effect
    assert "the same curve and DivergingLoss at update 4 as job-1" in second.result.summary
    assert state.next_action is NextAction.end
    assert "clip_gradients: had no effect (job-2)" in state.end_reason


def test_the_clip_threshold_comes_from_the_gradient_norms_before_the_onset() -> None:
    config = {"DivergingLoss": [{"strategy": "clip_gradients"}]}
    state = State(policy="adaptive", run_spec=script(20, clip=1e9), policy_config=config)
    state = ended(begin_attempt(state, "job-1"), diverged(3), grad_norm_median=0.8)
    state = plan_next(state)
    assert state.run_spec.script_hyperparameters["clip"] == pytest.approx(0.8)
    assert "median gradient norm before the finding was 0.8" in state.planned_change.reason


def test_findings_are_repaired_by_their_rule_class_not_their_name() -> None:
    spike = Finding(rule="Spike", rule_class="LossSpike", step=300)
    sound = [Checkpoint(path=f"/c/step-{s:09d}", epoch=s // 100, step=s) for s in (100, 200)]
    spec = RunSpec(debugger_save_interval=10, checkpoint_every_steps=100)
    state = plan_next(begin_attempt(State(policy="adaptive", run_spec=spec), "j"), [spike], sound)
    assert state.planned_change.strategy == "rollback_and_skip"
    # an older payload without the class: the spec's rules name it
    named = RunSpec(
        debugger_save_interval=10,
        checkpoint_every_steps=100,
        rules=[{"name": "Spike", "rule": "LossSpike"}],
    )
    old = Finding(rule="Spike", step=300)
    state = plan_next(begin_attempt(State(policy="adaptive", run_spec=named), "j"), [old], sound)
    assert state.planned_change.strategy == "rollback_and_skip"


def test_every_rule_class_names_the_trouble_it_detects() -> None:
    missing = set(RULES) - set(TROUBLE) - NOT_A_PATHOLOGY
    assert not missing, f"rules without a repair of their own kind: {sorted(missing)}"
    assert TROUBLE["TinyUpdates"] is Trouble.stall  # a stall raises the rate


def test_a_completed_attempt_is_classified_trained_with_its_loss() -> None:
    state = launched(script(0.1))
    state = update_current_attempt(state, outcome="Completed", final_loss=2.31)
    result = classify(state.current_attempt)
    assert (result.kind, result.loss) == (ResultKind.trained, 2.31)


def test_a_cut_caught_as_early_but_climbing_less_far_is_progress() -> None:
    # DivergingLoss catches both at its earliest update; the cut left the loss climbing
    # to ~30 instead of ~240 (the classic LM at --lr 2000 and 200, without clipping)
    hot = [5.7, 203.1, 270.3, 303.3, 231.0, 247.9, 240.0, 243.7, 250.0, 260.0]
    warm = [5.7, 20.2, 37.8, 76.0, 52.6, 30.3, 28.3, 27.3, 26.0, 25.0]
    state = ended(launched(script(2000)), diverged(9), loss_trace=hot)
    state = plan_next(state)
    assert lr_of(state) == 200
    state = ended(relaunch(state, 2), diverged(9), loss_trace=warm)
    state = plan_next(state)
    assert state.planned_change.strategy == "search_lr_down" and lr_of(state) == 20
    # the same climb again after a cut: no progress, the search stops
    state = ended(relaunch(state, 3), diverged(9), loss_trace=[x * 1.01 for x in warm])
    state = plan_next(state)
    assert state.next_action is NextAction.end or state.planned_change.strategy != (
        "search_lr_down"
    )


def test_probing_plans_a_few_rates_of_the_bracket_side_by_side() -> None:
    state = plan_next(launched(script(2000)), [diverged(9)], probing=True)
    assert state.planned_change is None and state.next_action is NextAction.launch_new
    rates = [p.run_spec.script_hyperparameters["lr"] for p in state.probes]
    assert rates == pytest.approx([200, 20, 2])
    assert {p.strategy for p in state.probes} == {"search_lr_down"}
    # with both ends known: a quarter, half and three quarters across the bracket
    state = plan_next(launched(script(1.0)), [diverged(8)])
    state = plan_next(relaunch(state, 2), [stalled()], probing=True)
    rates = sorted(p.run_spec.script_hyperparameters["lr"] for p in state.probes)
    assert 0.1 < rates[0] < rates[1] < rates[2] < 1.0
    assert rates[1] == pytest.approx(math.sqrt(0.1))


def test_the_first_cut_from_sound_weights_is_launched_without_probes() -> None:
    """A divergence after a sound checkpoint: the rate is near right, the first cut goes
    on from the checkpoint as the run. A cut that diverges again (later) is probed."""
    sound = Checkpoint(path="/ckpt/step-40", epoch=1, step=40)
    spec = script(1.0).model_copy(update={"debugger_save_interval": 1})
    state = plan_next(launched(spec), [diverged(45)], [sound], probing=True)
    assert not state.probes and state.planned_change.strategy == "search_lr_down"
    assert lr_of(state) == pytest.approx(0.1) and state.run_spec.init_checkpoint == "/ckpt/step-40"
    later = Checkpoint(path="/ckpt/step-80", epoch=2, step=80)
    again = plan_next(relaunch(state, 2), [diverged(85)], [sound, later], probing=True)
    rates = sorted(p.run_spec.script_hyperparameters["lr"] for p in again.probes)
    assert rates == pytest.approx([1e-4, 1e-3, 1e-2])
    assert {p.run_spec.init_checkpoint for p in again.probes} == {"/ckpt/step-80"}
    # without a sound checkpoint (caught before the first) the first cut is probed
    cold = plan_next(launched(spec), [diverged(5)], [], probing=True)
    assert len(cold.probes) == 3


def test_the_best_probe_becomes_the_next_launch_and_every_probe_is_kept() -> None:
    from remedy.strategies.probes import keep_probes, probe_attempt

    state = plan_next(launched(script(2000)), [diverged(9)], probing=True)
    hot, warm, cold = (probe_attempt(c, f"p-{i}") for i, c in enumerate(state.probes))
    hot = hot.model_copy(update={"findings": [diverged(9)], "outcome": "Stopped"})
    warm = warm.model_copy(
        update={  # its first losses (all loss_trace keeps) higher: the end decides
            "outcome": "Stopped",
            "steps_run": 90,
            "final_loss": 4.3,
            "loss_trace": [5.7] * 64,
            "spec": warm.spec.model_copy(update={"max_updates": 90}),  # its bound, as launched
        }
    )
    cold = cold.model_copy(
        update={"outcome": "Stopped", "steps_run": 90, "final_loss": 5.5, "loss_trace": [5.6] * 64}
    )
    kept = keep_probes(state, [hot, warm, cold])
    assert [a.kind.value for a in kept.history.attempts] == ["run", "probe", "probe", "probe"]
    assert kept.current_attempt.job_name == "job-1"  # probes never replace the full launch
    assert kept.run_spec.script_hyperparameters["lr"] == pytest.approx(20)
    assert kept.run_spec.max_updates is None  # the relaunch runs the job's own length
    assert "(best)" in kept.planned_change.reason and not kept.probes
    assert kept.history.attempts[1].result.kind is ResultKind.diverged
    # the probe that diverged closed the bracket: the next cut starts below 200
    assert bracket(kept.history.attempts).high == pytest.approx(200)


def test_a_held_probe_chosen_goes_on_as_the_run_and_is_counted_once() -> None:
    """A probe that held at its bound (a backend that can continue it) and trained best is
    the next run's job: the plan names it, the launch goes on from it, and the run's
    updates (the probe's first ones among them) are counted once in History.updates_spent.
    An earlier plan's probe (stopped since) is never continued."""
    from remedy.strategies.probes import choose_best, keep_probes, probe_attempt

    state = plan_next(launched(script(2000)), [diverged(9)], probing=True)
    hot, warm, cold = (probe_attempt(c, f"p-{i}") for i, c in enumerate(state.probes))
    hot = hot.model_copy(update={"findings": [diverged(9)], "outcome": "Stopped", "steps_run": 12})
    warm = warm.model_copy(update={"held": True, "steps_run": 50, "final_loss": 4.3})
    cold = cold.model_copy(update={"held": True, "steps_run": 50, "final_loss": 5.5})
    kept = keep_probes(state, [hot, warm, cold])
    assert kept.planned_change.continue_job == "p-1"
    run = begin_attempt(kept, "p-1")
    assert run.current_attempt.continues == "p-1" and run.current_attempt.job_name == "p-1"
    run = update_current_attempt(run, steps_run=90)  # the job's updates, the probe's 50 in them
    first = run.history.attempts[0].steps_run
    assert run.history.updates_spent == first + 12 + 90 + 50  # p-1's 50 once, cold's 50 spent
    # the same probe reused by a later plan stands for its result, but its job was stopped
    judged_warm = kept.history.attempts[2]
    assert judged_warm.job_name == "p-1" and judged_warm.held
    again = choose_best(kept.model_copy(update={"planned_change": None}), [], [judged_warm])
    assert again.planned_change.continue_job is None


def test_no_probe_trained_leaves_the_choice_to_a_new_plan() -> None:
    from remedy.strategies.probes import keep_probes, probe_attempt

    state = plan_next(launched(script(2000)), [diverged(9)], probing=True)
    probes = [
        probe_attempt(c, f"p-{i}").model_copy(
            update={"findings": [diverged(9)], "outcome": "Stopped"}
        )
        for i, c in enumerate(state.probes)
    ]
    kept = keep_probes(state, probes)
    assert kept.planned_change is None and not kept.probes
    replanned = plan_next(kept, [diverged(9)])
    # every probed rate diverged: the bracket's top is now 2, so the next cut is 0.2
    assert lr_of(replanned) == pytest.approx(0.2)


def test_the_new_warmup_reaches_past_the_epoch_where_the_trouble_began() -> None:
    """Built-in job, 8 updates an epoch (256 images, batch 32), warmup 1 epoch: a
    divergence at update 21 (epoch 2, after the rate rose) keeps the warmup rate through
    epoch 2, not one epoch more."""
    from remedy.strategies.longer_warmup import LongerWarmup

    spec = RunSpec(train_samples=256, batch_size=32, num_epochs=8, warmup_epochs=1)
    state = ended(launched(spec), diverged(20))  # hook step 20: update 21
    strategy = LongerWarmup.for_state(state, state.findings)
    assert strategy.onset_epoch == 2
    assert strategy.apply(spec).warmup_epochs == 3
    assert "the trouble began in epoch 2" in strategy.reason(spec, strategy.apply(spec))
    early = LongerWarmup.for_state(ended(launched(spec), diverged(3)), [diverged(3)])
    assert early.apply(spec).warmup_epochs == 2  # inside the warmup: one epoch more


def test_a_candidate_probed_before_is_not_probed_again_and_its_result_stands() -> None:
    """A second round of probes that proposes a spec already probed (the same rate, start
    and bound) reuses that probe's result: running it again would only repeat it."""
    from remedy.strategies.probes import keep_probes, probe_attempt, probed_before

    state = plan_next(launched(script(2000)), [diverged(9)], probing=True)
    first, second, _ = (probe_attempt(c, f"p-{i}") for i, c in enumerate(state.probes))
    bound = {"max_updates": 50}
    first = first.model_copy(
        update={"outcome": "Stopped", "steps_run": 50, "final_loss": 4.0,
                "spec": first.spec.model_copy(update=bound)}
    )  # fmt: skip
    state = keep_probes(state, [first])  # round one: one probe, trained
    earlier = state.history.attempts[-1]
    assert probed_before(state, first.spec) == earlier
    assert probed_before(state, second.spec.model_copy(update=bound)) is None
    worse = second.model_copy(
        update={"outcome": "Stopped", "steps_run": 50, "final_loss": 5.0,
                "spec": second.spec.model_copy(update=bound)}
    )  # fmt: skip
    kept = keep_probes(state, [worse], reused=[earlier])
    assert [a.job_name for a in kept.history.attempts] == ["job-1", "p-0", "p-1"]  # no copy
    assert kept.run_spec.script_hyperparameters == first.spec.script_hyperparameters
    assert kept.run_spec.max_updates is None
    assert "(probed before: p-0) (best)" in kept.planned_change.reason


def trained_probe(candidate: object, name: str, loss: float) -> object:
    from remedy.strategies.probes import probe_attempt

    probe = probe_attempt(candidate, name)  # type: ignore[arg-type]
    bound = probe.spec.model_copy(update={"max_updates": 50})
    return probe.model_copy(
        update={"outcome": "Stopped", "steps_run": 50, "final_loss": loss, "spec": bound}
    )


def test_a_best_probe_at_the_edge_of_the_range_probed_sends_the_next_round_past_it() -> None:
    """A stall at 1e-6: probes at 1e-5, 1e-4 and 1e-3 learn faster the higher the rate, so
    the rate that learns best may lie past 1e-3: the next rounds try 1e-2, then 0.1, then
    1, one at a time from the best probe. A round whose best lies inside its range, whose
    farthest rate diverged, or whose other rates only diverged, sends none."""
    from remedy.strategies.probes import choose_best, farther, with_probes

    state = plan_next(launched(script(1e-6)), [stalled()], probing=True)
    assert [p.run_spec.script_hyperparameters["lr"] for p in state.probes] == pytest.approx(
        [1e-5, 1e-4, 1e-3]
    )
    losses = {0: 2.2, 1: 1.9, 2: 1.2}  # the higher the rate, the faster it learns
    probes = [trained_probe(c, f"p-{i}", losses[i]) for i, c in enumerate(state.probes)]
    state, judged = with_probes(state, probes)
    [further] = farther(state, judged)
    assert further.run_spec.script_hyperparameters["lr"] == pytest.approx(1e-2)
    assert further.strategy == "search_lr_up"
    assert "past the best probe so far (0.001)" in further.reason
    assert further.changes["hyperparameters.lr"] == pytest.approx([1e-6, 1e-2])
    assert lr_of(state) == pytest.approx(1e-6)  # nothing committed yet

    # 1e-2 learns faster still: 0.1 next; it does too: 1 next, which diverges (it closes
    # the bracket): nothing further, and 0.1 is kept
    for name, loss in (("p-3", 0.9), ("p-4", 0.6)):
        state, new = with_probes(state, [trained_probe(further, name, loss)])
        judged = [*judged, *new]
        [further] = farther(state, judged)
    assert further.run_spec.script_hyperparameters["lr"] == pytest.approx(1.0)
    hot = trained_probe(further, "p-5", 0.0).model_copy(
        update={"findings": [diverged(4)], "final_loss": None}
    )
    state, new = with_probes(state, [hot])
    judged = [*judged, *new]
    assert farther(state, judged) == []
    assert bracket(state.history.attempts).high == pytest.approx(1.0)
    kept = choose_best(state, judged)
    assert lr_of(kept) == pytest.approx(0.1) and "(best)" in kept.planned_change.reason

    # a step past the best that learns slower ends the search there
    state = plan_next(launched(script(1e-6)), [stalled()], probing=True)
    probes = [trained_probe(c, f"s-{i}", losses[i]) for i, c in enumerate(state.probes)]
    state, judged = with_probes(state, probes)
    [further] = farther(state, judged)
    state, new = with_probes(state, [trained_probe(further, "s-3", 1.4)])
    assert farther(state, [*judged, *new]) == []
    assert lr_of(choose_best(state, [*judged, *new])) == pytest.approx(1e-3)

    # a divergence at 20000: 2000 and 200 diverge too, 20 alone trains. It is the lowest
    # rate, but nothing learned slower above it: the rates above were unstable, which
    # points nowhere past 20 (the word LM's case: 2, 0.2 and 0.02 each learned slower)
    state = plan_next(launched(script(20000.0)), [diverged(9)], probing=True)
    assert [p.run_spec.script_hyperparameters["lr"] for p in state.probes] == pytest.approx(
        [2000.0, 200.0, 20.0]
    )
    first = [
        trained_probe(c, f"d-{i}", 0.0).model_copy(
            update={"findings": [diverged(9)], "final_loss": None}
        )
        for i, c in enumerate(state.probes[:2])
    ]
    state, judged = with_probes(state, [*first, trained_probe(state.probes[2], "d-2", 5.0)])
    assert farther(state, judged) == []
    assert lr_of(choose_best(state, judged)) == pytest.approx(20.0)

    # a best probe inside the range probed: no further round
    state = plan_next(launched(script(1e-6)), [stalled()], probing=True)
    losses = {0: 2.2, 1: 1.0, 2: 1.5}  # 1e-4 best
    inside = [trained_probe(c, f"q-{i}", losses[i]) for i, c in enumerate(state.probes)]
    state, judged = with_probes(state, inside)
    assert farther(state, judged) == []


def test_a_search_keeps_the_higher_rate_whose_probe_trained_as_low_within_the_noise() -> None:
    """A short probe favours the smaller of two stable rates: of a search one way, a higher
    rate whose loss is above the lowest by less than the noise of the two means is kept
    (the spirals classifier: 0.001 to 1.002, 0.01 to 1.051, each loss spread about 0.05).
    Clear of the noise the lowest loss stands."""
    from remedy.strategies.probes import choose_best, with_probes

    def probed(lr: float, losses: dict[int, float], spread: float) -> State:
        state = plan_next(launched(script(lr)), [stalled() if lr < 1 else diverged(9)],
                          probing=True)  # fmt: skip
        probes = [
            trained_probe(c, f"p-{i}", losses[i]).model_copy(  # type: ignore[attr-defined]
                update={"final_loss_spread": spread}
            )
            for i, c in enumerate(state.probes)
        ]
        state, judged = with_probes(state, probes)
        return choose_best(state, judged)

    # from a stall at 1e-5: 1e-4, 1e-3 and 1e-2; 1e-2 within the noise of 1e-3's loss
    level = probed(1e-5, {0: 1.09, 1: 1.002, 2: 1.051}, spread=0.05)
    assert lr_of(level) == pytest.approx(1e-2)
    assert "(best: as low within the noise, at a higher rate)" in level.planned_change.reason
    assert lr_of(probed(1e-5, {0: 1.09, 1: 1.002, 2: 1.051}, spread=0.01)) == pytest.approx(1e-3)
    # downwards from a divergence at 2000 (200, 20, 2): 200 level with 20 is kept, clear
    # of the noise 20 stands
    assert lr_of(probed(2000.0, {0: 4.31, 1: 4.3, 2: 5.0}, spread=0.5)) == pytest.approx(200)
    assert lr_of(probed(2000.0, {0: 4.9, 1: 4.3, 2: 5.0}, spread=0.1)) == pytest.approx(20)


def test_a_decade_above_the_best_probe_that_was_outpaced_sends_one_probe_to_its_middle() -> None:
    """The word LM at 1/30 of its rate (0.67): 6.7 learns, 67 is outpaced at the rung (stable,
    far behind), 670 diverges. The rate that learns best may lie inside the decade above 6.7:
    one probe at its middle (21) before the run commits. Not where that rate diverged or
    trained (its loss at the bound ranks it), nor once the gap is finer than a decade, nor
    in a search down."""
    from remedy.state_schema import AttemptResult, ResultKind
    from remedy.strategies.probes import between, choose_best, farther, with_probes

    def round_of(state: State, outcome: str) -> tuple[State, list[object]]:
        probes = [trained_probe(c, f"p-{i}", 5.0 - i) for i, c in enumerate(state.probes)]
        higher = {
            "outpaced": AttemptResult(kind=ResultKind.outpaced, loss=6.8, summary="outpaced"),
            "trained": AttemptResult(kind=ResultKind.trained, loss=4.9, summary="trained"),
        }
        probes[0] = probes[0].model_copy(update={"final_loss": 4.5})  # the best: 6.67
        probes[1] = probes[1].model_copy(update={"result": higher.get(outcome)})
        if outcome == "diverged":
            probes[1] = probes[1].model_copy(update={"findings": [diverged(9)], "final_loss": None})
        probes[2] = probes[2].model_copy(update={"findings": [diverged(9)], "final_loss": None})
        return with_probes(state, probes)

    start = plan_next(launched(script(0.6667)), [stalled()], probing=True)
    assert [p.run_spec.script_hyperparameters["lr"] for p in start.probes] == pytest.approx(
        [6.667, 66.67, 666.7]
    )
    state, judged = round_of(start, "outpaced")
    assert farther(state, judged) == []  # the best lies inside the range probed
    [middle] = between(state, judged)
    assert middle.run_spec.script_hyperparameters["lr"] == pytest.approx(21.08, rel=1e-3)
    assert middle.strategy == "search_lr_up"
    assert "between the best probe so far (6.667) and 66.67, outpaced at its rung" in middle.reason
    assert lr_of(state) == pytest.approx(0.6667)  # nothing committed yet

    # the middle learns faster: it is kept; the gap above it is finer than a decade now
    state, new = with_probes(state, [trained_probe(middle, "p-3", 4.0)])
    assert between(state, [*judged, *new]) == []
    assert lr_of(choose_best(state, [*judged, *new])) == pytest.approx(21.08, rel=1e-3)

    # a higher rate that diverged, or trained to a higher loss, sends none
    for outcome in ("diverged", "trained"):
        state, judged = round_of(start, outcome)
        assert between(state, judged) == [], outcome

    # a search down: none (the run's cut is near right; a rate a little low still trains)
    down = plan_next(launched(script(20000.0)), [diverged(9)], probing=True)
    probes = [trained_probe(c, f"d-{i}", 5.0) for i, c in enumerate(down.probes)]
    probes[1] = probes[1].model_copy(update={"final_loss": 4.0})
    probes[0] = probes[0].model_copy(
        update={"result": AttemptResult(kind=ResultKind.outpaced, loss=6.8, summary="outpaced")}
    )
    state, judged = with_probes(down, probes)
    assert between(state, judged) == []


def test_a_probe_runs_at_most_a_quarter_of_a_job_whose_length_is_known() -> None:
    """Probes of 50 updates against a job of 90 would cost more than
    they tell: once a full launch ran to its end, a probe runs a quarter of its length,
    never under MIN_PROBE_STEPS (unless the budget is), never over the budget."""
    from remedy.strategies.probes import MIN_PROBE_STEPS, probe_length

    state = launched(script(0.02))
    assert state.budgets.probe_steps == 25
    assert probe_length(state) == 25  # the job's length is not known yet
    diverged_early = ended(state, diverged(9), outcome="Stopped", steps_run=20)
    assert probe_length(diverged_early) == 25  # stopped: not its length
    done = ended(state, None, outcome="Completed", steps_run=90)
    assert probe_length(done) == 22
    assert probe_length(ended(state, None, outcome="Completed", steps_run=1000)) == 25
    assert probe_length(ended(state, None, outcome="Completed", steps_run=20)) == MIN_PROBE_STEPS
    small_budget = done.model_copy(
        update={"budgets": done.budgets.model_copy(update={"probe_steps": 5})}
    )
    assert probe_length(small_budget) == 5
    warm = ended(state, None, outcome="Completed", steps_run=40, start_step=40)
    assert probe_length(warm) == 20  # its length counts the checkpoint's updates
    # a length the run states (its max_steps flag) is known before any launch ends
    stated = script(0.02).model_copy(
        update={"script_hyperparameters": {"lr": 0.02, "steps": 60},
                "hyperparameter_roles": {"learning_rate": "lr", "max_steps": "steps"}}
    )  # fmt: skip
    assert probe_length(launched(stated)) == 15


def dying(step: int) -> Finding:
    return Finding(rule="DyingRelu", rule_class="DeadRelu", step=step)


def chance_case(selu_failed_at: int) -> State:
    """The built-in chance case's path: ReLU without batch norm at lr 0.1 diverges in its
    first epoch, a lower warmup rate runs 75 updates to dying units, then SELU (first of
    the dead units' order: a new init restarts too, so it does not jump ahead) diverges at
    `selu_failed_at`; the next plan is returned."""
    built_in = RunSpec(activation="relu", add_batch_norm=0, learning_rate=0.1)
    state = plan_next(launched(built_in), [diverged(3)])
    assert state.planned_change.strategy == "lowest_warmup_lr"
    state = plan_next(relaunch(state, 2), [dying(74)])
    assert state.planned_change.strategy == "use_selu"
    return plan_next(relaunch(state, 3), [diverged(selu_failed_at)])


def test_a_change_that_made_the_run_fail_sooner_is_undone_with_the_next_fix() -> None:
    state = chance_case(selu_failed_at=13)  # update 14, against 75 before it
    change = state.planned_change
    assert change.strategy == "add_batch_norm"
    assert state.run_spec.activation == "relu" and state.run_spec.add_batch_norm == 1
    assert change.changes["activation"] == ["selu", "relu"]
    assert change.reason.endswith(
        "; undid use_selu: activation selu -> relu, init lecun_normal -> he_normal (job-3 "
        "failed at update 14, job-2 before it at 75)"
    ), change.reason
    assert state.run_spec.init_checkpoint is None  # an architecture set back starts cold


def test_a_change_after_which_the_run_failed_about_as_late_is_kept() -> None:
    state = chance_case(selu_failed_at=60)
    assert state.planned_change.strategy == "add_batch_norm"
    assert state.run_spec.activation == "selu"
    assert "undid" not in state.planned_change.reason


def test_a_rate_that_failed_sooner_is_left_to_the_bracket_not_undone() -> None:
    """A cut after which the run diverged sooner is not set back: the bracket holds both
    rates. The next fix (clipping) keeps the cut rate."""
    state = plan_next(launched(script(20, clip=1e9)), [diverged(9)])
    assert state.planned_change.strategy == "search_lr_down" and lr_of(state) == 2.0
    state = plan_next(relaunch(state, 2), [diverged(2)])  # update 3, against 10 before
    assert state.planned_change.strategy == "clip_gradients"
    assert lr_of(state) == 2.0 and "undid" not in state.planned_change.reason


def test_a_candidate_past_a_rate_that_learned_slower_than_a_nearer_one_is_not_probed() -> None:
    """Probes of 3e-3 and 3e-4 stand from an earlier round (3e-4 learned slower); a new
    round down from 0.03 offers 3e-3, 3e-4 and 3e-5: 3e-5 lies past 3e-4, farther the way
    the loss got worse, and is not worth a launch; a candidate between them, or one with
    nothing slower in front of it, is."""
    from remedy.strategies.probes import judge, past_a_slower_rate

    state = plan_next(launched(script(0.3)), [diverged(9)], probing=True)
    assert [p.run_spec.script_hyperparameters["lr"] for p in state.probes] == pytest.approx(
        [0.03, 3e-3, 3e-4]
    )
    losses = {0: 0.55, 1: 0.95, 2: 1.13}
    probed = [trained_probe(c, f"p-{i}", losses[i]) for i, c in enumerate(state.probes)]
    judged = [p.model_copy(update={"result": judge(p)}) for p in probed if isinstance(p, Attempt)]
    standing = judged[1:]  # 3e-3 and 3e-4
    why = past_a_slower_rate(script(3e-5), standing)
    assert why == "3e-05 lies past 0.0003, which learned slower than 0.003 (probed before)"
    assert past_a_slower_rate(script(1e-3), standing) is None  # between them
    assert past_a_slower_rate(script(0.01), standing) is None  # the faster way
    assert past_a_slower_rate(script(3e-5), standing[:1]) is None  # one alone: no trend


def test_a_model_that_plateaued_at_rates_a_decade_apart_gets_batch_norm_at_the_higher() -> None:
    """The built-in ReLU ResNet without batch norm learned nothing at 0.01, 0.001 and
    three rates between and around them, and spent its launches there (the chance case
    at seed 2). Two plateaus a decade apart rule the rate out: batch norm next, at the
    higher of those rates, which a normalised model takes."""
    learned_nothing = Finding(rule=NOT_TRAINED, rule_class=NOT_TRAINED, step=79)
    state = plan_next(launched(RunSpec(add_batch_norm=0, learning_rate=0.01)), [learned_nothing])
    assert state.planned_change.strategy == "search_lr_plateau"
    moved = lr_of(state)
    assert moved == pytest.approx(0.001) or moved == pytest.approx(0.1)
    state = plan_next(relaunch(state, 2), [learned_nothing])
    change = state.planned_change
    assert change.strategy == "add_batch_norm", change.reason
    assert state.run_spec.add_batch_norm == 1 and lr_of(state) == pytest.approx(max(moved, 0.01))
    assert "the rate ruled out (plateaued from " in change.reason, change.reason
