"""Strategies and policies on a user's script: they change the flags its roles map."""

from __future__ import annotations

from typing import ClassVar

import pytest

from remedy.decisions.plan import plan_next
from remedy.state_schema import ROLES, Finding, NextAction, RunSpec, State, flag_arguments
from remedy.state_schema.transitions import begin_attempt
from remedy.strategies import STRATEGIES, Strategy, get_strategy, register_strategy

EXPLODING = [Finding(rule="ExplodingTensor", step=5)]

# A script that maps every role, each to a flag of its own name with a dash.
EVERY_ROLE = {
    "learning-rate": 0.1, "warmup-learning-rate": 0.1, "warmup-epochs": 1, "num-epochs": 5,
    "grad-clip-norm": None, "batch-size": 64, "weight-decay": 2e-4, "optimizer": "momentum",
    "dropout": 0.0, "init": "he_normal", "activation": "elu", "add-batch-norm": False,
    "exclude-samples": [], "skip-steps": [],
}  # fmt: skip


def script(flags: dict, **roles: str) -> RunSpec:
    return RunSpec.model_validate(
        {"entry_point": "train.py", "hyperparameters": flags, "hyperparameter_roles": roles}
    )


def every_role() -> RunSpec:
    return script(EVERY_ROLE, **{role: role.replace("_", "-") for role in ROLES})


def launched(spec: RunSpec, policy: str = "adaptive") -> State:
    return begin_attempt(State(policy=policy, run_spec=spec), "job-1")


def ladder(state: State, findings: list[Finding]) -> tuple[list[str], State]:
    chosen = []
    for i in range(60):
        state = plan_next(state, findings)
        if state.next_action is NextAction.end:
            return chosen, state
        chosen.append(state.planned_change.strategy)
        state = begin_attempt(state, f"job-{i + 2}")
    raise AssertionError("the policy never ended")


def test_roles_are_exactly_what_the_strategies_declare() -> None:
    declared = {role for cls in STRATEGIES.values() for role in cls.roles()}
    assert declared == set(ROLES)


BUILT_IN_ONLY = {"rollback_and_skip"}  # windows of steps to pass over are no flag


def test_a_script_never_takes_a_built_in_only_strategy() -> None:
    for name in BUILT_IN_ONLY:
        assert STRATEGIES[name].missing_roles(every_role()) == ["skip_steps"]


@pytest.mark.parametrize("name", sorted(set(STRATEGIES) - BUILT_IN_ONLY))
def test_every_strategy_changes_only_the_flags_of_its_roles(name: str) -> None:
    spec = every_role()
    if name == "use_elu":
        spec = spec.with_roles({"activation": "relu"})
    if name == "use_momentum":
        spec = spec.with_roles({"optimizer": "sgd"})
    strategy = STRATEGIES[name].for_findings([]) if name == "drop_bad_samples" else None
    strategy = strategy or get_strategy(name)
    if name == "drop_bad_samples":
        strategy.samples = [3, 7]
    assert strategy.understood_by(spec) and strategy.applies(spec)
    after = strategy.apply(spec)
    changed = {
        flag
        for flag, value in after.script_hyperparameters.items()
        if spec.script_hyperparameters[flag] != value
    }
    assert changed and changed <= {role.replace("_", "-") for role in strategy.changes}
    # the built-in job's fields are not the script's: untouched
    assert after.model_dump(exclude={"script_hyperparameters"}) == spec.model_dump(
        exclude={"script_hyperparameters"}
    )
    assert strategy.reason(spec, after).startswith(strategy.explanation + " (--")


def test_the_rate_search_needs_only_the_learning_rate() -> None:
    spec = script({"lr": 20, "clip": 0.25}, learning_rate="lr", grad_clip_norm="clip")
    state = plan_next(launched(spec), EXPLODING)
    assert state.planned_change.strategy == "search_lr_down"
    assert state.run_spec.script_hyperparameters == {"lr": 2.0, "clip": 0.25}
    assert state.planned_change.changes == {"hyperparameters.lr": [20, 2.0]}
    assert state.planned_change.reason == (
        "Lower the learning rate below every rate found too high (--lr 20 -> 2.0); "
        "so far too low at <= -, too high at >= 20"
    )
    assert flag_arguments(state.run_spec.script_hyperparameters) == [
        "--lr",
        "2.0",
        "--clip",
        "0.25",
    ]


def test_lower_lr_10x_also_lowers_a_mapped_warmup_rate() -> None:
    spec = script({"lr": 0.1, "wlr": 0.5}, learning_rate="lr", warmup_learning_rate="wlr")
    after = get_strategy("lower_lr_10x").apply(spec)
    assert after.script_hyperparameters == pytest.approx({"lr": 0.01, "wlr": 0.01})


def test_the_end_reason_names_only_the_roles_really_missing() -> None:
    spec = script({"lr": 20, "clip": None}, learning_rate="lr", grad_clip_norm="clip")
    chosen, final = ladder(launched(spec), EXPLODING)
    # the same finding at the same update after the cut: the search stops there; clipping
    # without the job's gradient norms: 1.0 (then 0.1 is not tried: one clip per order)
    assert chosen == ["search_lr_down", "clip_gradients"]
    reason = final.end_reason or ""
    assert "search_lr_down: nothing left to change" in reason
    assert "lowest_warmup_lr: the script has no flag for warmup_learning_rate " in reason
    assert "add_batch_norm: the script has no flag for add_batch_norm (hyperparameter_roles)" in (
        reason
    )
    assert "use_selu: the script has no flag for activation (hyperparameter_roles)" in reason
    assert "no flag for learning_rate" not in reason


def test_a_script_without_roles_gets_no_strategy_and_is_told_why() -> None:
    chosen, final = ladder(launched(script({"lr": 1})), EXPLODING)
    assert chosen == []
    assert "search_lr_down: the script has no flag for learning_rate (hyperparameter_roles)" in (
        final.end_reason or ""
    )


def test_batch_norm_through_a_store_true_flag() -> None:
    spec = script({"lr": 0.1, "batch-norm": False}, add_batch_norm="batch-norm")
    spec = spec.model_copy(update={"bare_flags": ["batch-norm"]})
    strategy = get_strategy("add_batch_norm")
    assert strategy.understood_by(spec) and strategy.applies(spec)
    after = strategy.apply(spec)
    assert after.script_hyperparameters["batch-norm"] is True
    assert after.job_arguments() == ["--lr", "0.1", "--batch-norm"]
    assert flag_arguments(after.script_hyperparameters) == ["--lr", "0.1", "--batch-norm", "True"]
    assert not strategy.applies(after)


def test_an_activation_without_an_init_flag_swaps_only_the_activation() -> None:
    spec = script({"act": "elu"}, activation="act")
    selu = get_strategy("use_selu")
    after = selu.apply(spec)
    assert after.script_hyperparameters == {"act": "selu"}
    assert not selu.applies(after)  # the unmapped init does not keep it applying forever


def test_adam_needs_the_learning_rate_too() -> None:
    adam = STRATEGIES["use_adam"]
    assert not adam.understood_by(script({"opt": "sgd"}, optimizer="opt"))
    spec = script({"opt": "sgd", "lr": 0.1}, optimizer="opt", learning_rate="lr")
    assert adam().apply(spec).script_hyperparameters == {"opt": "adam", "lr": 1e-3}


def test_longer_warmup_without_the_epoch_count_is_bounded_by_its_own_limit() -> None:
    spec = script({"we": 1}, warmup_epochs="we")
    strategy = get_strategy("longer_warmup")
    for _ in range(10):
        if not strategy.applies(spec):
            break
        spec = strategy.apply(spec)
    assert spec.script_hyperparameters == {"we": 5}


def test_the_seed_policy_passes_over_steps_the_script_does_not_take() -> None:
    spec = script({"lr": 0.0012}, learning_rate="lr")
    state = plan_next(launched(spec, policy="seed"), EXPLODING)
    assert state.planned_change.strategy == "lower_lr"
    assert state.history.num_learning_rate_adjustments == 1
    final = plan_next(begin_attempt(state, "job-2"), EXPLODING)
    assert final.next_action is NextAction.end
    reason = final.end_reason or ""
    assert "lower_warmup_lr: the script has no flag for warmup_learning_rate" in reason
    assert "lower_lr: nothing left to change" in reason


def test_a_strategy_declaring_an_unknown_role_is_refused() -> None:
    class Bogus(Strategy):
        name = "bogus_strategy_test"
        changes: ClassVar[tuple[str, ...]] = ("momentum_typo",)

    with pytest.raises(ValueError, match="unknown roles \\['momentum_typo'\\]"):
        register_strategy(Bogus)
    assert "bogus_strategy_test" not in STRATEGIES


def test_a_strategy_moves_a_coupled_flag_and_says_so() -> None:
    spec = RunSpec.model_validate(
        {
            "entry_point": "train.py",
            "hyperparameter_style": "--name=value",
            "hyperparameters": {"learning_rate": 1.0, "min_lr": 0.1},
            "hyperparameter_roles": {"learning_rate": "learning_rate"},
            "coupled_flags": {"min_lr": {"follows": "learning_rate"}},
        }
    )
    strategy = get_strategy("lower_lr_10x")
    after = strategy.apply(spec)
    assert after.script_hyperparameters == {"learning_rate": 0.1, "min_lr": 0.01}
    assert after.job_arguments() == ["--learning_rate=0.1", "--min_lr=0.01"]
    reason = strategy.reason(spec, after)
    assert "--learning_rate 1.0 -> 0.1" in reason and "--min_lr 0.1 -> 0.01" in reason


def test_a_clip_flag_of_zero_means_no_clipping_as_in_nanogpt() -> None:
    """nanoGPT's grad_clip = 0.0 (and the transformers Trainer's max_grad_norm = 0) turn
    clipping off: the role reads null (off), and clip_gradients sets a real threshold."""
    spec = RunSpec.model_validate(
        {
            "entry_point": "train.py",
            "hyperparameters": {"grad_clip": 0.0, "lr": 6e-3},
            "hyperparameter_roles": {"grad_clip_norm": "grad_clip", "learning_rate": "lr"},
        }
    )
    assert spec.role("grad_clip_norm") is None
    clipped = get_strategy("clip_gradients").apply(spec)
    assert clipped.script_hyperparameters["grad_clip"] == 1.0  # no norms known: 1.0
    with pytest.raises(ValueError, match="grad_clip_norm"):
        RunSpec.model_validate(
            {
                "entry_point": "train.py",
                "hyperparameters": {"grad_clip": -1.0},
                "hyperparameter_roles": {"grad_clip_norm": "grad_clip"},
            }
        )
