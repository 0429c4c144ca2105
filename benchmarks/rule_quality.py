"""Rule quality over a zoo of real training runs: false alarms on healthy ones, detections
and their delay on pathological ones, per rule and for the recommended preset.

    nice .venv/bin/python benchmarks/rule_quality.py [--only NAME ...] [--keep DIR]

Each member of the zoo is a tiny model trained in this process (1 torch thread) on
synthetic data with the debugger's Hook saving what the rules read (losses every step;
gradients, weights, biases and activations every SAVE_INTERVAL steps; labels, predictions
and each epoch's test accuracy): MLP classifiers (a random teacher network's labels) and a
word-level LSTM language model (text from a random Markov chain). An epoch is
STEPS_PER_EPOCH updates then an evaluation of the test set; epoch 0 is a warmup at its own
learning rate, as in the seed workflow, so every run has a schedule change and epoch
boundaries. Nothing is injected: every pathology is a configuration people get wrong
(a learning rate, an activation, a depth).

Each rule that runs without parameters (with its defaults) and the recommended preset
(debugger/rule_presets.py; it fires when any of its rules does) is evaluated over every
finished store, as `remedy check` does. Printed per rule: IssuesFound on healthy runs
(false alarms), pathologies detected, and the TRAIN steps from each pathology's onset to
the detection. Onsets, decided from the run's own record with hindsight:
- "start": the cause is there from the first update (a learning rate, a depth), so step 0;
- "main_lr": the first update at the main learning rate (the schedule's change, epoch 1);
- "above_initial": the first step whose loss stays above the initial loss (step 0's,
  before any update: about ln(vocabulary) for a language model, a uniform guess) for
  that step and the next 5.
A detection counts when it comes at most DETECT_WITHIN save intervals after the onset;
one before the onset is reported as early.

tests/debugger/test_rule_quality.py trains two members and checks the recommended preset.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from torch import nn  # noqa: E402

from remedy.debugger import Hook, HookConfig, ModeKeys, RuleStatus, create_trial  # noqa: E402
from remedy.debugger.capture import capture_config  # noqa: E402
from remedy.debugger.evaluator import RuleEvaluator  # noqa: E402
from remedy.debugger.rule_check import check_rule  # noqa: E402
from remedy.debugger.rule_config import RuleConfig  # noqa: E402
from remedy.debugger.rule_presets import preset  # noqa: E402
from remedy.debugger.rules.registry import rules_with_defaults  # noqa: E402

SAVE_INTERVAL = 10
DETECT_WITHIN = 2  # save intervals
STEPS_PER_EPOCH = 50
BATCH = 64
EVAL_BATCHES = 8
CLASSES = 10
FEATURES = 32
VOCABULARY = 256
SEQUENCE = 32
RECOMMENDED = "recommended"


@dataclass(frozen=True)
class Member:
    """One zoo configuration. `pathology` empty: a healthy run."""

    name: str
    model: str = "mlp"  # mlp | lstm
    activation: str = "relu"
    depth: int = 3  # hidden layers
    width: int = 64
    batch_norm: bool = False
    optimizer: str = "adam"  # sgd | momentum | adam
    warmup_lr: float = 1e-3
    lr: float = 3e-3
    epochs: int = 8
    seed: int = 0
    clip: float | None = None
    head_scale: float = 1.0  # the output layer's initial weights x this: a high first loss
    pathology: str = ""
    onset: str = "start"  # start | main_lr | above_initial


ZOO: tuple[Member, ...] = (
    # healthy: seeds, activations, optimizers, with and without batch norm, a language model
    Member("mlp_relu_adam"),
    Member("mlp_relu_adam_s1", seed=1),
    Member("mlp_relu_adam_s2", seed=2),
    Member("mlp_elu_adam", activation="elu"),
    Member("mlp_tanh_adam", activation="tanh"),
    Member("mlp_relu_bn_momentum", batch_norm=True, optimizer="momentum", warmup_lr=0.01, lr=0.1),
    Member(
        "mlp_elu_bn_momentum_s1",
        activation="elu",
        batch_norm=True,
        optimizer="momentum",
        warmup_lr=0.01,
        lr=0.1,
        seed=1,
    ),
    Member("mlp_relu_sgd", optimizer="sgd", warmup_lr=0.05, lr=0.1),
    Member("mlp_deep_relu_bn_adam", depth=6, batch_norm=True),
    Member("lstm_lm_sgd", model="lstm", optimizer="sgd", warmup_lr=5.0, lr=20.0, clip=0.25),
    Member("lstm_lm_adam", model="lstm", warmup_lr=1e-3, lr=3e-3, seed=1),
    # the word LM's clip at 5x its learning rate: the loss spikes above a uniform guess
    # for a few steps, then recovers as well as the others (it must not be stopped)
    Member(
        "lstm_lm_sgd_transient_spike",
        model="lstm",
        optimizer="sgd",
        warmup_lr=100.0,
        lr=100.0,
        clip=0.25,
    ),
    # a long run (1,000 steps) whose noisy loss sits on a plateau for 600 steps and then
    # falls (5.38, 5.26, 5.26, 5.25, 5.25, 5.25, 5.24, 5.20, ... per 100 steps): healthy,
    # and LossNotDecreasing's fixed 0.1 % called it stalled at step 259
    Member(
        "lstm_lm_sgd_long_slow",
        model="lstm",
        optimizer="sgd",
        warmup_lr=1.0,
        lr=1.0,
        clip=0.25,
        width=32,
        epochs=20,
    ),
    # pathologies
    Member(
        "early_explosion",
        activation="elu",
        optimizer="sgd",
        depth=6,
        warmup_lr=3.0,
        lr=3.0,
        pathology="early explosion",
    ),
    Member(
        "late_explosion",
        activation="elu",
        optimizer="momentum",
        depth=6,
        warmup_lr=0.01,
        lr=1.0,
        pathology="late explosion",
        onset="main_lr",
    ),
    Member(
        "finite_divergence",
        optimizer="adam",
        warmup_lr=1e-3,
        lr=1.0,
        pathology="finite divergence",
        onset="main_lr",
    ),
    Member(
        "lstm_lr_far_too_high",
        model="lstm",
        optimizer="sgd",
        warmup_lr=1000.0,
        lr=1000.0,
        clip=0.25,
        pathology="LSTM lr far too high",
        onset="above_initial",
    ),
    Member(
        "stalled_lr_far_too_small",
        optimizer="sgd",
        warmup_lr=1e-6,
        lr=1e-6,
        pathology="stalled (lr far too small)",
    ),
    Member(
        "lstm_stalled",
        model="lstm",
        optimizer="sgd",
        warmup_lr=1e-4,
        lr=1e-4,
        clip=0.25,
        pathology="stalled LSTM (lr far too small)",
    ),
    Member(
        "vanishing_deep_sigmoid",
        activation="sigmoid",
        depth=12,
        optimizer="sgd",
        warmup_lr=0.01,
        lr=0.01,
        pathology="vanishing gradients",
    ),
    # a first loss well above ln 10 (the output layer initialised 30x too large); the loss
    # falls to 1.6 in the warmup epoch, then Adam at 0.1 drives it back up to 2.28 (chance)
    # and keeps it there: finite, below its first loss, far below 10x its best
    Member(
        "rebound_from_high_start",
        head_scale=30.0,
        optimizer="adam",
        warmup_lr=1e-3,
        lr=0.1,
        pathology="climbs back above its running minimum from a high first loss",
        onset="main_lr",
    ),
    # Adam at 100x its usual rate: the first updates push most hidden ReLUs below zero
    # for every input (90 % of layers 2-4 dead after 5 steps); test accuracy 0.28
    Member("dead_relu", optimizer="adam", warmup_lr=0.1, lr=0.1, depth=4, pathology="dead ReLUs"),
)


# -- data and models ----------------------------------------------------------------------


def classification_data(seed: int, samples: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ~ N(0, 1) and the labels a fixed random linear teacher gives them (learnable
    to about 90 % test accuracy from 3,200 samples)."""
    teacher = torch.Generator().manual_seed(1234)  # one task for every member
    w = torch.randn(FEATURES, CLASSES, generator=teacher)
    data = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, FEATURES, generator=data)
    return x, (x @ w).argmax(dim=1)


def markov_text(seed: int, tokens: int) -> torch.Tensor:
    """Tokens of a fixed random Markov chain: each token is followed by one of 4 others
    (entropy about ln 4 against ln VOCABULARY for a uniform guess)."""
    chain = torch.Generator().manual_seed(4321)
    successors = torch.randint(0, VOCABULARY, (VOCABULARY, 4), generator=chain)
    weights = torch.tensor([0.5, 0.25, 0.15, 0.1])
    draw = torch.Generator().manual_seed(seed)
    picks = torch.multinomial(weights, tokens, replacement=True, generator=draw)
    text = torch.empty(tokens, dtype=torch.long)
    text[0] = 0
    for i in range(1, tokens):
        text[i] = successors[text[i - 1], picks[i]]
    return text


ACTIVATIONS = {"relu": nn.ReLU, "elu": nn.ELU, "tanh": nn.Tanh, "sigmoid": nn.Sigmoid}


def mlp(member: Member) -> nn.Module:
    layers: list[nn.Module] = []
    width_in = FEATURES
    for _ in range(member.depth):
        layers.append(nn.Linear(width_in, member.width))
        if member.batch_norm:
            layers.append(nn.BatchNorm1d(member.width))
        layers.append(ACTIVATIONS[member.activation]())
        width_in = member.width
    head = nn.Linear(width_in, CLASSES)
    with torch.no_grad():
        head.weight.mul_(member.head_scale)
    layers.append(head)
    return nn.Sequential(*layers)


class LanguageModel(nn.Module):
    """Embedding, one LSTM layer, a dense head over the vocabulary (PyTorch's word LM)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCABULARY, 32)
        self.rnn = nn.LSTM(32, width, batch_first=True)
        self.head = nn.Linear(width, VOCABULARY)
        for weight in (self.embed.weight, self.head.weight):
            nn.init.uniform_(weight, -0.1, 0.1)  # the word LM's init: a near-uniform start
        nn.init.zeros_(self.head.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(self.embed(tokens))
        return self.head(out).reshape(-1, VOCABULARY)


def optimizer_for(member: Member, model: nn.Module) -> torch.optim.Optimizer:
    if member.optimizer == "adam":
        return torch.optim.Adam(model.parameters(), lr=member.warmup_lr)
    momentum = 0.9 if member.optimizer == "momentum" else 0.0
    return torch.optim.SGD(model.parameters(), lr=member.warmup_lr, momentum=momentum)


# -- training -----------------------------------------------------------------------------


@dataclass
class Trained:
    member: Member
    store: Path
    losses: list[float]  # TRAIN losses by TRAIN step
    train_steps_before_eval: list[int]  # per EVAL step: TRAIN steps done before it
    test_accuracy: list[float]  # per epoch
    onset: int | None  # TRAIN step; None for a healthy run
    seconds: float


def rule_configs() -> list[RuleConfig]:
    """Every default rule under its own name and the recommended preset's rules as
    recommended.NAME."""
    configs = [RuleConfig(name=rule, rule=rule) for rule in rules_with_defaults()]
    for entry in preset(RECOMMENDED):
        configs.append(RuleConfig.from_dict(entry | {"name": f"{RECOMMENDED}.{entry['name']}"}))
    return configs


def train(member: Member, folder: Path) -> Trained:
    torch.set_num_threads(1)
    torch.manual_seed(member.seed)
    started = time.time()
    rules = [check_rule(config) for config in rule_configs()]
    config = capture_config(rules, str(folder / "tensors"), SAVE_INTERVAL)
    config["collections"]["activations"]["modes"] = {
        "EVAL": {"save_interval": 10**9, "start_step": 10**9, "save_steps": []}
    }
    hook = Hook.from_config(HookConfig.from_dict(config))
    language = member.model == "lstm"
    model = LanguageModel(member.width) if language else mlp(member)
    optimizer = optimizer_for(member, model)
    criterion = nn.CrossEntropyLoss()
    hook.register_module(model)
    hook.register_loss(criterion)
    hook.register_optimizer(optimizer)
    batches = STEPS_PER_EPOCH * member.epochs
    # Fresh samples every epoch (each seen once) and a fixed test set: a healthy run
    # does not overfit, so what a rule reports on it is a false alarm.
    train_samples = batches * BATCH
    if language:
        stream = markov_text(member.seed, BATCH * SEQUENCE * (batches + EVAL_BATCHES) + 1)
        inputs = stream[:-1].reshape(-1, SEQUENCE)
        targets = stream[1:].reshape(-1, SEQUENCE)
    else:
        inputs, targets = classification_data(member.seed, (batches + EVAL_BATCHES) * BATCH)
    train_x, train_y = inputs[:train_samples], targets[:train_samples]
    test_x, test_y = inputs[train_samples:], targets[train_samples:]
    shuffle = torch.Generator().manual_seed(member.seed)
    losses: list[float] = []
    before_eval: list[int] = []
    accuracies: list[float] = []
    for epoch in range(member.epochs):
        for group in optimizer.param_groups:
            group["lr"] = member.warmup_lr if epoch == 0 else member.lr
        model.train()
        hook.set_mode(ModeKeys.TRAIN)
        epoch_samples = torch.arange(
            epoch * STEPS_PER_EPOCH * BATCH, (epoch + 1) * STEPS_PER_EPOCH * BATCH
        )
        for batch in epoch_samples[torch.randperm(len(epoch_samples), generator=shuffle)].split(
            BATCH
        ):
            logits = model(train_x[batch])
            labels = train_y[batch].reshape(-1)
            loss = criterion(logits, labels)
            if "labels" in hook.config.collections:
                hook.save_tensor("labels", labels, collection="labels")
                hook.save_tensor("predictions", logits.argmax(1), collection="predictions")
            optimizer.zero_grad()
            loss.backward()
            if member.clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), member.clip)
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        hook.set_mode(ModeKeys.EVAL)
        correct = total = 0
        with torch.no_grad():
            for batch in torch.arange(len(test_x)).split(BATCH):
                logits = model(test_x[batch])
                labels = test_y[batch].reshape(-1)
                criterion(logits, labels)
                hook.save_tensor("labels", labels, collection="labels")
                hook.save_tensor("predictions", logits.argmax(1), collection="predictions")
                correct += int((logits.argmax(1) == labels).sum())
                total += labels.numel()
                before_eval.append(len(losses))
        accuracies.append(correct / total)
        hook.save_tensor("accuracy", torch.tensor(correct / total), collection="metrics")
    hook.close()
    assert len(losses) == batches
    return Trained(
        member,
        folder / "tensors",
        losses,
        before_eval,
        accuracies,
        onset_of(member, losses),
        time.time() - started,
    )


def onset_of(member: Member, losses: list[float]) -> int | None:
    if not member.pathology:
        return None
    if member.onset == "start":
        return 0
    if member.onset == "main_lr":
        return STEPS_PER_EPOCH
    initial = losses[0]
    for step in range(1, len(losses) - 5):
        if all(not (loss <= initial) for loss in losses[step : step + 6]):  # NaN counts
            return step
    return None


# -- evaluation ---------------------------------------------------------------------------


@dataclass
class Detection:
    status: RuleStatus
    train_step: int | None  # TRAIN steps done when it fired
    details: str


def evaluate(trained: Trained) -> dict[str, Detection]:
    """Every rule configuration over the finished store: {configuration name: Detection},
    plus RECOMMENDED (the first of its rules to fire)."""
    with tempfile.TemporaryDirectory(prefix="status-") as folder:  # statuses: only while judging
        status_dir = Path(folder)
        evaluator = RuleEvaluator(
            create_trial(trained.store), rule_configs(), status_dir, log=lambda line: None
        )
        evaluator.start()
        evaluator.poll()
        found: dict[str, Detection] = {}
        for name, record in evaluator.statuses.items():
            step = None
            if record.status is RuleStatus.ISSUES_FOUND and record.step is not None:
                step = record.step
                if record.mode is ModeKeys.EVAL:
                    step = trained.train_steps_before_eval[record.step]
            found[name] = Detection(record.status, step, record.details or "")
        ours = [d for n, d in found.items() if n.startswith(f"{RECOMMENDED}.")]
        fired = [d for d in ours if d.status is RuleStatus.ISSUES_FOUND]
        first = min(fired, key=lambda d: d.train_step or 0) if fired else None
        found[RECOMMENDED] = first or Detection(RuleStatus.NO_ISSUES_FOUND, None, "")
        return found


@dataclass
class Row:
    rule: str
    false_alarms: dict[str, str] = field(default_factory=dict)
    detected: dict[str, int] = field(default_factory=dict)  # member -> steps after onset
    late: dict[str, int] = field(default_factory=dict)
    early: dict[str, int] = field(default_factory=dict)  # fired before the onset


def tabulate(runs: list[tuple[Trained, dict[str, Detection]]]) -> list[Row]:
    names = [*rules_with_defaults(), RECOMMENDED]
    rows = {name: Row(name) for name in names}
    for trained, found in runs:
        for name in names:
            detection = found[name]
            if detection.status is not RuleStatus.ISSUES_FOUND:
                continue
            row = rows[name]
            if trained.onset is None:
                if trained.member.pathology:
                    row.early[trained.member.name] = detection.train_step or 0
                else:
                    row.false_alarms[trained.member.name] = detection.details
                continue
            delay = (detection.train_step or 0) - trained.onset
            if delay < 0:
                row.early[trained.member.name] = delay
            elif delay <= DETECT_WITHIN * SAVE_INTERVAL:
                row.detected[trained.member.name] = delay
            else:
                row.late[trained.member.name] = delay
    return list(rows.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", action="append", help="train only this member")
    parser.add_argument("--keep", type=Path, help="train into this folder (kept)")
    parser.add_argument("--verbose", action="store_true", help="print every finding")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="rule-quality-"))
    runs = []
    for member in ZOO:
        if args.only and member.name not in args.only:
            continue
        trained = train(member, folder / member.name)
        found = evaluate(trained)
        runs.append((trained, found))
        kind = member.pathology or "healthy"
        first, last = trained.losses[0], trained.losses[-1]
        fired = {n: d for n, d in found.items() if d.status is RuleStatus.ISSUES_FOUND}
        print(
            f"{member.name:24s} {kind:32s} loss {first:.3g} -> {last:.3g}, test accuracy "
            f"{trained.test_accuracy[-1]:.3f}, onset {trained.onset}, {trained.seconds:.0f} s; "
            f"fired: {', '.join(f'{n}@{d.train_step}' for n, d in fired.items()) or '-'}",
            flush=True,
        )
        if args.verbose:
            for name, detection in fired.items():
                print(f"    {name}: {detection.details}")
    healthy = sum(not t.member.pathology for t, _ in runs)
    sick = len(runs) - healthy
    print()
    print(
        f"| rule | false alarms ({healthy} healthy) | detected within {DETECT_WITHIN} save "
        f"intervals ({sick} pathologies) | steps from onset to detection |"
    )
    print("|---|---|---|---|")
    for row in tabulate(runs):
        if row.rule == RECOMMENDED:
            label = f"**{RECOMMENDED} preset**"
        elif any(row.rule == entry["rule"] for entry in preset(RECOMMENDED)):
            label = f"{row.rule} (in {RECOMMENDED})"
        else:
            label = row.rule
        delays = ", ".join(f"{m} {d}" for m, d in row.detected.items())
        other = [f"{m} late {d}" for m, d in row.late.items()]
        other += [f"{m} before onset ({d})" for m, d in row.early.items()]
        alarms = f"{len(row.false_alarms)}"
        if row.false_alarms:
            alarms += f" ({', '.join(row.false_alarms)})"
        extra = f"; {', '.join(other)}" if other else ""
        print(f"| {label} | {alarms} | {len(row.detected)} | {delays}{extra} |")
    summary = {
        trained.member.name: {"onset": trained.onset, "accuracy": trained.test_accuracy[-1]}
        for trained, _ in runs
    }
    (folder / "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"\nstores in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
