"""Every built-in rule against real training: it fires on a run with its pathology and stays
quiet on a healthy run. Runs go through the real Hook, store and evaluator."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from remedy.debugger import RULES, RuleStatus, create_trial
from remedy.debugger.evaluator import RuleEvaluator
from remedy.debugger.rule_config import RuleConfig
from tests.debugger import scenarios as sc
from tests.debugger.helpers import evaluate

# -- the runs -------------------------------------------------------------------------------

_CACHE: dict[str, sc.Run] = {}
_STORES = tempfile.TemporaryDirectory(prefix="rule-pathologies-")  # removed at exit


def run(name: str) -> sc.Run:
    """Each scenario trains once per test session."""
    if name not in _CACHE:
        store = Path(_STORES.name) / name / "store"
        _CACHE[name] = SCENARIOS[name](store)
    return _CACHE[name]


def _healthy(store: Path) -> sc.Run:
    """A small ReLU classifier on separable blobs, evaluated on fresh samples."""
    return sc.fit(
        store, sc.mlp([4, 16, 16, 2]), sc.blobs(128), steps=30, lr=0.1, classify=True,
        eval_data=sc.blobs(128, seed=1), eval_every=5,
    )  # fmt: skip


REGRESSION = sc.regression(64)

SCENARIOS: dict[str, Callable[[Path], sc.Run]] = {
    "healthy": _healthy,
    # a short regression that is still improving when it ends
    "healthy_regression": lambda s: sc.fit(s, sc.mlp([4, 1]), REGRESSION, steps=12, lr=0.05),
    "healthy_tanh": lambda s: sc.fit(
        s, sc.mlp([4, 16, 16, 1], "Tanh"), REGRESSION, steps=5, lr=0.01
    ),
    "healthy_images": lambda s: sc.fit(
        s, sc.tiny_cnn(), sc.images(256, raw=False), steps=10, lr=0.05, classify=True, batch=64
    ),
    # 20 sigmoid layers: each multiplies the gradient by at most 1/4
    "deep_sigmoid": lambda s: sc.fit(
        s, sc.mlp([4] + [16] * 20 + [1], "Sigmoid"), REGRESSION, steps=4, lr=0.01
    ),
    # 10 tanh layers with weights of std 2: the chaotic regime, gradients grow backwards
    "deep_tanh_large_init": lambda s: sc.fit(
        s,
        sc.init_(sc.mlp([4] + [32] * 10 + [1], "Tanh"), weight_std=2.0),
        REGRESSION,
        steps=3,
        lr=1e-4,
    ),  # fmt: skip
    # first layer's bias initialised at -10: its ReLUs never fire
    "dead_relu": lambda s: sc.fit(
        s,
        sc.init_(sc.mlp([4, 16, 16, 1]), bias=-10.0, layers=slice(0, 1)),
        REGRESSION,
        steps=4,
        lr=0.01,
    ),  # fmt: skip
    # N(0, 1) weights instead of fan-in scaling: activations grow layer by layer
    "unscaled_init": lambda s: sc.fit(
        s, sc.init_(sc.mlp([4, 32, 32, 32, 1]), weight_std=1.0), REGRESSION, steps=4, lr=1e-4
    ),
    # raw sensor values in the ten-thousands fed to tanh/sigmoid layers
    "raw_inputs_tanh": lambda s: sc.fit(
        s, sc.mlp([4, 16, 16, 1], "Tanh"), (REGRESSION[0] * 1e4, REGRESSION[1]), steps=3, lr=0.01
    ),
    "raw_inputs_sigmoid": lambda s: sc.fit(
        s,
        sc.mlp([4, 16, 16, 1], "Sigmoid"),
        (REGRESSION[0] * 1e4, REGRESSION[1]),
        steps=3,
        lr=0.01,
    ),  # fmt: skip
    # a learning rate below float32 resolution: the weights never move
    "tiny_lr": lambda s: sc.fit(s, sc.mlp([4, 16, 1]), REGRESSION, steps=5, lr=1e-12),
    # everything initialised to zero: hidden units stay identical and silent
    "zero_init": lambda s: sc.fit(
        s, sc.init_(sc.mlp([4, 16, 16, 1]), zero=True), REGRESSION, steps=4, lr=0.1
    ),
    # 97 % / 3 % labels
    "imbalanced": lambda s: sc.fit(
        s,
        sc.mlp([4, 16, 2]),
        sc.blobs(128, weights=[0.97, 0.03], spread=3.0),
        steps=6,
        lr=0.1,
        classify=True,
    ),  # fmt: skip
    # a learning rate of 0 (a misconfigured schedule): nothing learns (long enough for
    # LossNotDecreasing's 6 windows of 20 steps)
    "lr_zero": lambda s: sc.fit(
        s,
        sc.mlp([4, 16, 2]),
        sc.blobs(128),
        steps=130,
        lr=0.0,
        classify=True,
        eval_data=sc.blobs(128, seed=1),
        eval_every=5,
    ),  # fmt: skip
    # 16 samples of noise memorised by a wide MLP; evaluated on fresh noise
    "memorise_noise": lambda s: sc.fit(
        s,
        sc.mlp([8, 64, 64, 1]),
        (torch.randn(16, 8), torch.randn(16, 1)),
        steps=60,
        lr=0.01,
        optimizer="Adam",
        eval_data=(torch.randn(64, 8), torch.randn(64, 1)),
        eval_every=10,
    ),  # fmt: skip
    # a linear model trained far past convergence (Overtraining: 10 windows of 20 steps)
    "converged": lambda s: sc.fit(s, sc.mlp([4, 1]), REGRESSION, steps=260, lr=0.1),
    # learning rate above the stability limit: weights grow geometrically
    "diverging": lambda s: sc.fit(
        s, sc.mlp([4, 1]), sc.regression(64, scale=3.0), steps=12, lr=0.3
    ),
    # SGD with lr 5 and momentum 0.9 on overlapping classes: accuracy jumps around
    "oscillating": lambda s: sc.fit(
        s,
        sc.mlp([4, 32, 2]),
        sc.blobs(256, spread=2.5),
        steps=30,
        lr=5.0,
        classify=True,
        momentum=0.9,
    ),  # fmt: skip
    # raw 0..255 pixels
    "raw_images": lambda s: sc.fit(
        s, sc.tiny_cnn(), sc.images(256, raw=True), steps=10, lr=1e-4, classify=True, batch=64
    ),
    # a data loader that hangs for 1.5 s before step 3
    "stalled": lambda s: sc.fit(
        s, sc.mlp([4, 1]), REGRESSION, steps=5, lr=0.05, before_step=sc.stall(1.5, 3)
    ),
    # the same training twice (seed 0) and once with another seed
    "seed0": lambda s: sc.fit(s, lambda: sc.mlp([4, 8, 1]), REGRESSION, steps=4, lr=0.05, seed=0),
    "seed0_again": lambda s: sc.fit(
        s, lambda: sc.mlp([4, 8, 1]), REGRESSION, steps=4, lr=0.05, seed=0
    ),
    "seed1": lambda s: sc.fit(
        s, lambda: sc.mlp([4, 8, 1], seed=1), REGRESSION, steps=4, lr=0.05, seed=1
    ),
}


def other(name: str) -> list[str]:
    return [str(run(name).store)]


# rule, parameters, pathological run, healthy run, what the finding must mention
CASES: list[tuple[str, dict[str, Any] | Callable[[], dict[str, Any]], str, str, str]] = [
    ("VanishingGradient", {}, "deep_sigmoid", "healthy", "gradient/0."),
    ("ExplodingTensor", {}, "diverging_to_nan", "healthy", ""),
    ("DeadRelu", {}, "dead_relu", "healthy", "1/relu_output"),
    ("PoorWeightInitialization", {}, "unscaled_init", "healthy", "variance differs"),
    ("SaturatedActivation", {}, "raw_inputs_tanh", "healthy_tanh", "1/tanh_input"),
    ("WeightUpdateRatio", {}, "tiny_lr", "healthy", "too small"),
    ("TinyUpdates", {}, "tiny_lr", "healthy", "nothing learns"),
    ("AllZero", {"collection_names": ["gradients"]}, "zero_init", "healthy", "100.0% zeros"),
    ("ClassImbalance", {}, "imbalanced", "healthy", "class 0 has"),
    ("LossNotDecreasing", {}, "lr_zero", "healthy", "is +0% from it, at step"),
    # lr_zero's 130 steps: windows of 40, judged every 10 steps
    ("LossPlateau", {"window": 40, "check_every": 10}, "lr_zero", "healthy", "a fall of 0 (0%)"),
    (
        "DivergingLoss",
        {"num_steps": 3, "initial_factor": None},
        "diverging",
        "healthy",
        "its best window mean",
    ),
    # severe_factor off: its first window (1e12, finite) would fire before the NaN
    (
        "DivergingLoss",
        {"num_steps": 2, "severe_factor": None},
        "diverging_to_nan",
        "healthy",
        "is not finite",
    ),
    ("Overfit", {}, "memorise_noise", "healthy", "eval loss"),
    ("Overtraining", {}, "converged", "healthy_regression", "has not improved"),
    (
        "SimilarAcrossRuns",
        lambda: {"other_trials": other("seed0")},
        "seed1",
        "seed0_again",
        "differs from",
    ),
    ("StalledTraining", {"threshold": 1.0}, "stalled", "healthy", "between TRAIN step 2"),
    (
        "TensorVariance",
        {"max_threshold": 1e4, "collection_names": ["weights"]},
        "diverging",
        "healthy",
        "variance",
    ),
    ("UnchangedTensor", {"collection_names": ["weights"]}, "lr_zero", "healthy", "unchanged"),
    ("CheckInputImages", {}, "raw_images", "healthy_images", "not normalised"),
    ("Confusion", {}, "confused", "healthy", "predicted"),
    ("OscillatingLoss", {}, "oscillating", "healthy", "oscillates"),
    ("SlowConvergence", {}, "lr_zero", "healthy", "largest one-step gain"),
    ("DyingRelu", {}, "dead_relu", "healthy", "exactly zero"),
    ("GradientRatio", {}, "deep_sigmoid", "healthy", "vanishing gradients"),
    ("LossSpike", {"window": 10}, "late_spike", "healthy", "robust sigmas"),
    ("GradientNormSpike", {"window": 10}, "late_spike", "healthy", "robust sigmas"),
]

# Healthy for 40 steps, then a schedule's mistake: the learning rate jumps 12x (real
# dynamics: the loss spikes while every value is still finite).
SCENARIOS["late_spike"] = lambda s: sc.fit(
    s, sc.mlp([4, 16, 16, 1]), sc.regression(256), steps=48, lr=0.05, batch=32,
    lr_at=lambda step: 0.05 if step < 40 else 0.6,
)  # fmt: skip


def _confusable(n: int, seed: int) -> tuple[Any, Any]:
    """Three separable blobs; half of class 2's samples labelled 3: classes 2 and 3 have
    the same inputs, so a model learns 0 and 1 and cannot tell 2 from 3."""
    x, y = sc.blobs(n, classes=3, seed=seed)
    relabel = (y == 2) & (torch.rand(n, generator=torch.Generator().manual_seed(seed)) < 0.5)
    return x, torch.where(relabel, torch.tensor(3), y)


SCENARIOS["confused"] = lambda s: sc.fit(
    s, sc.mlp([4, 16, 4]), _confusable(256, 0), steps=60, lr=0.1, classify=True,
    eval_data=_confusable(256, 1), eval_every=10,
)  # fmt: skip
SCENARIOS["diverging_to_nan"] = lambda s: sc.fit(s, sc.mlp([4, 8, 1]), REGRESSION, steps=8, lr=1e4)


def test_every_registered_rule_has_a_case() -> None:
    assert {case[0] for case in CASES} == set(RULES)


def _params(case: Any) -> dict[str, Any]:
    return case() if callable(case) else dict(case)


@pytest.mark.parametrize(("rule", "params", "sick", "healthy", "mention"), CASES)
def test_fires_on_its_pathology(
    rule: str, params: Any, sick: str, healthy: str, mention: str
) -> None:
    record = evaluate(run(sick).store, rule, **_params(params))
    assert record.status is RuleStatus.ISSUES_FOUND, record.details
    assert mention in record.details
    assert record.step is not None


@pytest.mark.parametrize(("rule", "params", "sick", "healthy", "mention"), CASES)
def test_quiet_on_a_healthy_run(
    rule: str, params: Any, sick: str, healthy: str, mention: str
) -> None:
    store = run(healthy).store
    record = evaluate(store, rule, **_params(params))
    assert record.status is RuleStatus.NO_ISSUES_FOUND, record.details
    trial = create_trial(store)
    assert record.steps_evaluated == len(trial.steps("GLOBAL"))


def test_gradient_ratio_also_sees_exploding_gradients() -> None:
    record = evaluate(run("deep_tanh_large_init").store, "GradientRatio")
    assert record.status is RuleStatus.ISSUES_FOUND
    assert "exploding gradients" in record.details
    assert record.tensor == "gradient/0.weight"


def test_the_gradient_norm_spikes_no_later_than_the_loss() -> None:
    """OLMo 2's observation on the late_spike run: the gradient norm shows the spike first
    (or at the same step), so a rollback can be planned before the loss is gone."""
    store = run("late_spike").store
    gradient = evaluate(store, "GradientNormSpike", window=10)
    loss = evaluate(store, "LossSpike", window=10)
    assert gradient.step is not None and loss.step is not None
    assert gradient.step <= loss.step


def test_stalled_training_fires_while_a_job_hangs(tmp_path: Path) -> None:
    """The job wrote two steps and then hangs: no new step arrives, the idle check fires."""
    import time

    hook = sc.make_hook(tmp_path / "store", ("losses",))
    model = sc.mlp([4, 1])
    criterion = torch.nn.MSELoss()
    hook.register_module(model)
    hook.register_loss(criterion)
    for _ in range(2):
        criterion(model(REGRESSION[0]), REGRESSION[1])
    hook.flush()
    status_dir = tmp_path / "status"
    config = RuleConfig(name="Stalled", rule="StalledTraining", parameters={"threshold": 0.3})
    evaluator = RuleEvaluator(create_trial(tmp_path / "store"), [config], status_dir, log=print)
    evaluator.start()
    evaluator.poll()
    assert evaluator.statuses["Stalled"].status is RuleStatus.IN_PROGRESS
    time.sleep(0.5)  # the hang
    evaluator.poll()
    record = evaluator.statuses["Stalled"]
    hook.close()
    assert record.status is RuleStatus.ISSUES_FOUND
    assert "no new step" in record.details


# -- the defaults that judge what their rule is about (issue 12) ----------------------------

# A vocabulary-like label distribution: 40 classes at Zipf frequencies (1/rank), learnable.
_ZIPF = [1.0 / rank for rank in range(1, 41)]
SCENARIOS["zipf_classes"] = lambda s: sc.fit(
    s, sc.mlp([4, 32, 40]), sc.blobs(512, classes=40, weights=_ZIPF, spread=0.3), steps=3,
    lr=0.1, classify=True,
)  # fmt: skip


def test_class_imbalance_counts_only_for_a_few_classes() -> None:
    """Uneven counts over many classes (Zipf) are the data's nature: quiet by default; the
    managed defaults count them."""
    store = run("zipf_classes").store
    assert evaluate(store, "ClassImbalance").status is RuleStatus.NO_ISSUES_FOUND
    legacy = evaluate(store, "ClassImbalance", **RULES["ClassImbalance"].LEGACY_DEFAULTS)
    assert legacy.status is RuleStatus.ISSUES_FOUND
    assert "class 0 has" in legacy.details


def test_poor_weight_initialization_sees_the_backward_signal_vanish() -> None:
    """20 sigmoid layers at PyTorch's init: the gradient vanishes layer by layer at step 0."""
    record = evaluate(run("deep_sigmoid").store, "PoorWeightInitialization")
    assert record.status is RuleStatus.ISSUES_FOUND
    assert "weight gradient mean square differs" in record.details
    assert record.step == 0


def test_poor_weight_initialization_leaves_a_stalled_loss_to_the_learning_rate_rules() -> None:
    """A learning rate of 0 stalls a good init: not an init problem by default (the managed
    defaults judge the loss, and fire)."""
    store = run("lr_zero").store
    assert evaluate(store, "PoorWeightInitialization").status is RuleStatus.NO_ISSUES_FOUND
    legacy = RULES["PoorWeightInitialization"].LEGACY_DEFAULTS
    record = evaluate(store, "PoorWeightInitialization", **legacy)
    assert record.status is RuleStatus.ISSUES_FOUND
    assert "loss has not decreased" in record.details


def _flat_noisy_regression(seed: int) -> Callable[[Path], sc.Run]:
    """A rate far too small to move a regression whose batches are noisy: its loss stays
    around the untrained model's, 300 steps."""
    return lambda store: sc.fit(
        store, sc.mlp([10, 32, 1]), sc.friedman(2048, seed), steps=300, lr=1e-7, batch=32,
        seed=seed, collections=("losses",),
    )  # fmt: skip


for _seed in (2, 3, 32):
    SCENARIOS[f"flat_noisy_regression_{_seed}"] = _flat_noisy_regression(_seed)
# Adam at 3 on the same regression: the loss leaps from 220 (its first window averages
# 1.5e5), then stays at 400-600, finite.
SCENARIOS["finite_climb"] = lambda s: sc.fit(
    s, sc.mlp([10, 32, 1]), sc.friedman(2048, 2), steps=60, lr=3.0, batch=32, seed=2,
    optimizer="Adam", collections=("losses",),
)  # fmt: skip


@pytest.mark.parametrize("seed", [2, 3, 32])
def test_diverging_loss_reads_a_flat_loss_in_its_batches_noise_as_no_divergence(seed: int) -> None:
    """Each of these runs once fired, a flat loss read as a divergence: a low first window
    put 1.1x the untrained loss within the batches' noise (seeds 2 and 3, at steps in the
    hundreds), or the lowest window, a low draw, made later ones look 128 % of the way back
    up (seed 32). The bar is now clear of the noise of the first steps."""
    status = evaluate(run(f"flat_noisy_regression_{seed}").store, "DivergingLoss")
    assert status.status is RuleStatus.NO_ISSUES_FOUND, status.details


def test_diverging_loss_still_stops_a_finite_climb_above_the_untrained_loss_at_once() -> None:
    status = evaluate(run("finite_climb").store, "DivergingLoss")
    assert status.status is RuleStatus.ISSUES_FOUND
    # its first window averages 1.5e5, 676x the untrained loss: fired there, not at step 9
    assert "at once), at step 4" in status.details, status.details
    assert "the untrained model's 219.6" in status.details


def test_diverging_loss_stops_a_window_far_above_the_untrained_loss_at_its_first_window() -> None:
    """A rate above the stability limit: the loss grows geometrically from its first step.
    Its first window already averages more than severe_factor (10) x the untrained
    model's loss, so the rule fires there (step 4) rather than waiting for the second."""
    status = evaluate(run("diverging").store, "DivergingLoss")
    assert status.status is RuleStatus.ISSUES_FOUND
    assert "at once), at step 4" in status.details, status.details
    waited = evaluate(run("diverging").store, "DivergingLoss", severe_factor=None)
    assert "for 2 windows in a row, at step 9" in waited.details, waited.details
