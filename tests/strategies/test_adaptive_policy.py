"""The adaptive policy: per-finding order, cheap first, skipping what failed, a clear end."""

from __future__ import annotations

from remedy.decisions.plan import plan_next
from remedy.state_schema import Finding, NextAction, RunSpec, State
from remedy.state_schema.transitions import begin_attempt
from remedy.strategies import Checkpoint, get_policy

EXPLODING = [Finding(rule="ExplodingTensor", step=5, tensor="gradient/head.weight")]
LATE = [Finding(rule="ExplodingTensor", step=300, tensor="gradient/head.weight")]
CLEAN = [Checkpoint(path="/ckpt/epoch-0001", epoch=1, step=79)]


def launched(spec: RunSpec | None = None) -> State:
    return begin_attempt(State(policy="adaptive", run_spec=spec or RunSpec()), "job-1")


def run_ladder(state: State, findings: list[Finding], checkpoints=()) -> list[str]:
    """Plan -> launch -> plan ... until the policy ends; the strategies in order."""
    chosen = []
    for i in range(60):
        state = plan_next(state, findings, checkpoints)
        if state.next_action is NextAction.end:
            break
        chosen.append(state.planned_change.strategy)
        state = begin_attempt(state, f"job-{i + 2}")
    assert state.next_action is NextAction.end
    return chosen, state


def test_from_scratch_explosion_lowers_the_warmup_rate_then_adds_batch_norm() -> None:
    chosen, final = run_ladder(launched(), EXPLODING)
    assert chosen[:4] == [
        "lowest_warmup_lr",
        "add_batch_norm",
        "search_lr_down",
        "clip_gradients",
    ]
    # the seed ladder's five halvings in one launch; the main rate only by search_lr_down
    first = final.history.attempts[1].spec
    assert first.warmup_learning_rate == 0.003125 and first.learning_rate == 0.1


def test_with_a_clean_checkpoint_hyperparameters_come_before_architecture() -> None:
    chosen, _ = run_ladder(launched(), LATE, CLEAN)
    architecture = {"add_batch_norm", "use_selu", "use_relu", "use_tanh"}
    first_arch = min(i for i, name in enumerate(chosen) if name in architecture)
    assert set(chosen[:first_arch]) >= {"search_lr_down", "clip_gradients", "lower_warmup_lr"}
    assert all(name in architecture or name == "change_init" for name in chosen[first_arch:])


def test_nothing_is_tried_more_often_than_its_limit_and_the_end_says_why() -> None:
    chosen, final = run_ladder(launched(), EXPLODING)
    # every attempt diverged at the same update: one cut, which did not move the failure
    # later, so the rate search stops; clipping without gradient norms to go by: once
    assert chosen.count("clip_gradients") == 1 and chosen.count("search_lr_down") == 1
    assert chosen.count("add_batch_norm") == 1
    assert len(chosen) == len(set(chosen))
    reason = final.end_reason or ""
    assert reason.startswith("policy 'adaptive' has no strategy left")
    assert "ExplodingTensor" in reason and "add_batch_norm: tried 1x, failed" in reason


def test_a_strategy_already_tried_in_this_run_is_skipped() -> None:
    state = launched()
    state = plan_next(state, EXPLODING)  # lowest_warmup_lr
    state = begin_attempt(state, "job-2")
    state = plan_next(state, EXPLODING)
    assert state.planned_change.strategy == "add_batch_norm"


def test_strategies_the_entry_point_does_not_understand_are_skipped() -> None:
    # hyperparameters_understood (deprecated) restricts the built-in job's roles
    spec = RunSpec(hyperparameters_understood=["learning_rate", "add_batch_norm"])
    chosen, final = run_ladder(launched(spec), EXPLODING)
    # search_lr_down moves a warmup rate only when the job takes one: it still applies
    assert chosen == ["add_batch_norm", "search_lr_down"]
    assert final.run_spec.warmup_learning_rate == 0.1  # not understood, so not changed
    reason = final.end_reason or ""
    assert "clip_gradients: entry point does not take grad_clip_norm" in reason


def test_findings_pick_their_own_order() -> None:
    state = launched()
    dead = plan_next(state, [Finding(rule="DeadRelu", step=50)])
    # AUTOTRAINER's order: a new init restarts as SELU does, so it is not put first
    assert dead.planned_change.strategy == "use_selu"
    slow = plan_next(state, [Finding(rule="LossNotDecreasing", step=50)])
    assert slow.planned_change.strategy == "search_lr_plateau"
    over = plan_next(state, [Finding(rule="Overfit", step=50)])
    assert over.planned_change.strategy == "add_weight_decay"
    unknown = plan_next(state, [Finding(rule="MyOwnRule", step=50)])
    assert unknown.planned_change.strategy == "search_lr_down"


def test_non_finite_gradient_without_a_data_problem_lowers_the_warmup_rate() -> None:
    state = plan_next(launched(), [Finding(rule="NonFiniteGradient", step=5)])
    assert state.planned_change.strategy == "lowest_warmup_lr"


def test_policy_config_overrides_the_order_for_the_findings_it_names() -> None:
    config = {"ExplodingTensor": [{"strategy": "use_tanh"}]}
    state = State.model_validate(launched().model_dump() | {"policy_config": config})
    state = plan_next(state, EXPLODING)
    assert state.planned_change.strategy == "use_tanh"
    state = plan_next(begin_attempt(state, "job-2"), EXPLODING)
    assert state.next_action is NextAction.end


def test_adaptive_is_the_default_and_the_demo_keeps_the_seed_ladder() -> None:
    from remedy.cli.main import demo_state

    assert State().policy == "adaptive"
    assert demo_state().policy == "seed"
    assert get_policy("adaptive").warm_start and not get_policy("seed").warm_start


def test_a_model_that_learns_nothing_at_two_rates_gets_the_model_changes_next() -> None:
    """A plateau's order searches the rate first; once the model learned nothing at rates
    a decade apart, the model's changes come next, batch norm first: the built-in ReLU
    ResNet without batch norm learned nothing at 0.1, 0.01 and 0.001, under Adam and after
    a new init, and once ended "no strategy left" with batch norm untried
    (benchmarks/repair_quality.py, the chance case)."""
    not_trained = [Finding(rule="NotTrained", rule_class="NotTrained", step=79)]
    chosen, final = run_ladder(launched(), not_trained)
    assert chosen[:4] == ["search_lr_plateau", "add_batch_norm", "use_adam", "change_init"]
    assert chosen[4:] == ["search_lr_plateau", "search_lr_plateau"]
    assert final.run_spec.add_batch_norm


def test_not_trained_after_dead_units_keeps_mending_the_units() -> None:
    """NotTrained after an attempt whose units died (DyingRelu) gets the dead units' order
    first (the built-in chance case: SELU, then batch norm), not a search of rates that
    cannot revive them."""
    state = plan_next(launched(), [Finding(rule="DyingRelu", rule_class="DyingRelu", step=5)])
    assert state.planned_change.strategy == "use_selu"
    state = begin_attempt(state, "job-2")
    not_trained = [Finding(rule="NotTrained", rule_class="NotTrained", step=79)]
    state = plan_next(state, not_trained)
    assert state.planned_change.strategy == "add_batch_norm"
    without = plan_next(launched(), not_trained)  # no diagnosis: the plateau's order
    assert without.planned_change.strategy == "search_lr_plateau"


def test_dead_units_in_a_script_with_no_architecture_flag_search_the_rate_down() -> None:
    """A rate too high kills ReLUs as it trains (a bag-of-words classifier on AdamW at 1.0:
    DyingRelu at update 100). A script that maps only its rate has none of the order's
    architecture changes: its rate is searched down, below the rate that killed them,
    where it once ended "no strategy left"."""
    script = RunSpec.model_validate(
        {
            "entry_point": "train.py",
            "hyperparameters": {"lr": 1.0},
            "hyperparameter_roles": {"learning_rate": "lr"},
        }
    )
    dead = [Finding(rule="DyingRelu", rule_class="DyingRelu", step=100)]
    state = plan_next(launched(script), dead)
    assert state.next_action is not NextAction.end, state.end_reason
    assert state.planned_change.strategy == "search_lr_down"
    assert "--lr 1.0 -> 0.1" in state.planned_change.reason


def test_a_new_init_is_ordered_with_the_restarts_not_the_cheap_changes() -> None:
    """cheap_first puts first only what keeps the weights (and may warm-start): a new init
    restarts from scratch, so it keeps its place among the architecture changes."""
    from remedy.strategies.outcomes import Trouble
    from remedy.strategies.policies.adaptive import order_of

    vanishing = [rung.strategy for rung in order_of(Trouble.vanishing)]
    assert vanishing == ["search_lr_up", "use_selu", "use_relu", "add_batch_norm", "change_init"]
    dead = [rung.strategy for rung in order_of(Trouble.dead_units)]
    assert dead[:3] == ["use_selu", "add_batch_norm", "change_init"]


def test_not_trained_after_a_decisive_divergence_repair_goes_on_with_the_next_one() -> None:
    """The built-in chance case at seeds 1 and 2: a divergence in the first epoch, the
    warmup rate lowered, then a run that no longer diverged but learned nothing. Batch
    norm, the next decisive repair, comes before the plateau's search of rates; once it
    too learned nothing, the plateau's order follows."""
    built_in = RunSpec(activation="relu", add_batch_norm=0, learning_rate=0.1)
    state = plan_next(launched(built_in), EXPLODING)
    assert state.planned_change.strategy == "lowest_warmup_lr"
    not_trained = [Finding(rule="NotTrained", rule_class="NotTrained", step=79)]
    state = plan_next(begin_attempt(state, "job-2"), not_trained)
    assert state.planned_change.strategy == "add_batch_norm"
    assert state.run_spec.add_batch_norm == 1
    state = plan_next(begin_attempt(state, "job-3"), not_trained)
    assert state.planned_change.strategy == "search_lr_plateau"


def test_not_trained_after_a_cut_of_the_rate_for_a_divergence_gets_batch_norm() -> None:
    """The built-in chance case at seed 2: a divergence, the warmup rate lowered, a second
    divergence after the warmup (a sound checkpoint: the rate cut, warm), then a run that
    no longer diverged but learned nothing. The cut masked the divergence: batch norm,
    the next decisive repair, before the plateau's search of rates."""
    built_in = RunSpec(activation="relu", add_batch_norm=0, learning_rate=0.1)
    state = plan_next(launched(built_in), EXPLODING)
    assert state.planned_change.strategy == "lowest_warmup_lr"
    state = plan_next(begin_attempt(state, "job-2"), LATE, CLEAN)
    assert state.planned_change.strategy == "search_lr_down"
    not_trained = [Finding(rule="NotTrained", rule_class="NotTrained", step=159)]
    state = plan_next(begin_attempt(state, "job-3"), not_trained)
    assert state.planned_change.strategy == "add_batch_norm", state.planned_change.reason
    assert state.run_spec.add_batch_norm == 1
