"""adaptive: per finding an ordered list of strategies, skipping what already failed.

The orders start from AUTOTRAINER's published repair orders (reference/repair-anchors.md)
and add what this project's scenario taught. Within an order, changes that keep the weights
(hyperparameters) come before those that restart from scratch (architecture, a new init),
because the first can warm-start from the last clean checkpoint: a retry that costs a
fraction of a run.

When the problem began before any clean checkpoint exists, every strategy restarts from
scratch and that cost advantage is gone; the policy then uses the finding's own order
(`FROM_SCRATCH`), which puts the most decisive repair first, so fewer full restarts are
spent. A user's policy_config replaces the order for the findings it names.
"""

from __future__ import annotations

from remedy.state_schema import NOT_TRAINED, Finding, PolicyStep, State
from remedy.strategies.base import Strategy
from remedy.strategies.made_worse import made_worse
from remedy.strategies.outcomes import Trouble, rule_class, trouble
from remedy.strategies.policies.base import Decision, Policy, register_policy
from remedy.strategies.policies.ladder import Walk, cheap_first, walk
from remedy.strategies.rate_ruled_out import back_to_highest_plateau, rate_ruled_out
from remedy.strategies.search_lr import SearchLR, SearchLRDown
from remedy.strategies.still_descending import is_question
from remedy.strategies.warm_start import Checkpoint, update_of


def rungs(*names: str | tuple[str, int]) -> list[PolicyStep]:
    """PolicySteps from names (max_times 1) or (name, max_times) pairs."""
    steps = []
    for n in names:
        name, times = (n, 1) if isinstance(n, str) else n
        steps.append(PolicyStep(strategy=name, max_times=times))
    return steps


# A divergence (exploding or non-finite gradients, a loss that climbs and stays up). The
# learning rate first, searched as a bracket over the attempts (search_lr_down: 10x below
# every rate found too high, again while each cut moves the failure later, bisecting once a
# rate has stalled); then clipping at the gradient norm the job had before the onset, and
# warmup; architecture last.
DIVERGENCE = rungs(
    ("search_lr_down", 6),
    "clip_gradients",
    ("lower_warmup_lr", 2),
    "longer_warmup",
    "add_batch_norm",
    "use_selu",
    "use_relu",
    "use_tanh",
    "change_init",
)
# Updates far too small: the rate goes up, inside the bracket.
STALL = rungs(("search_lr_up", 6), "use_adam", "change_init")
# The loss stopped falling: the rate moves (both ways when probed), then the optimizer,
# the init, and last the architecture: a model that learns nothing at any rate (the
# built-in ReLU ResNet without batch norm: NotTrained at 0.1, 0.01 and 0.001, under Adam,
# after a new init) ended "no strategy left" with batch norm, its documented fix, untried.
PLATEAU = rungs(("search_lr_plateau", 3), "use_adam", "change_init", "add_batch_norm")
# A plateau at rates a decade apart (strategies/rate_ruled_out.py): the model's changes
# before any more rates, normalisation first; Adam and a new init came after the rates on
# the built-in ReLU ResNet without batch norm, and it learned nothing under either.
RATE_RULED_OUT = rungs("add_batch_norm", "use_adam", "change_init")
# Levelled off early, and lower rates reached its loss in a fraction of its updates (the
# verdict's question, answered): a rate too high, searched down with the finer steps of a
# run that learned.
NOISE_FLOOR = rungs(("search_lr_down", 3))

# Orders by the trouble a finding's rule detects (strategies/outcomes.py: TROUBLE, keyed
# by rule class), so a rule the user named "Spike" gets the spike order. They start from
# AUTOTRAINER's published repair orders and add what this project's scenarios taught.
ORDERS: dict[Trouble, list[PolicyStep]] = {
    Trouble.divergence: DIVERGENCE,
    Trouble.spike: DIVERGENCE,  # after a rollback, when one is possible (see orders())
    Trouble.stall: STALL,
    Trouble.plateau: PLATEAU,
    Trouble.noise_floor: NOISE_FLOOR,
    Trouble.vanishing: rungs(
        ("search_lr_up", 2), "use_selu", "use_relu", "add_batch_norm", "change_init"
    ),
    Trouble.dead_units: rungs(
        "use_selu", "add_batch_norm", "change_init", "use_leaky_relu", "use_elu"
    ),
    Trouble.oscillation: rungs(
        "use_adam", ("search_lr_down", 3), "raise_batch_size", "use_momentum", "change_init"
    ),
    Trouble.overfit: rungs("add_weight_decay", "add_dropout", "use_adamw"),
    Trouble.poor_init: rungs("change_init", "use_selu", "add_batch_norm"),
    # A rule of the user's that names no trouble we know: the most common pathology.
    Trouble.unknown: DIVERGENCE,
}

# Rungs after the whole of their trouble's order, architecture included (cheap_first would
# put a change of rate first). Dead units: a rate too high kills ReLUs as it trains (a
# bag-of-words classifier on AdamW at 1.0, 1000x its rate: DyingRelu at update 100), and a
# script that maps no flag of its architecture has no other lever (it ended "no strategy
# left"); a model whose units die at any rate (the built-in ReLU ResNet without batch norm)
# is mended by its architecture first.
LAST_RESORT: dict[Trouble, list[PolicyStep]] = {
    Trouble.dead_units: rungs(("search_lr_down", 3)),
}


def order_of(kind: Trouble) -> list[PolicyStep]:
    """The trouble's order, cheap rungs first, its last resort after them all."""
    return cheap_first(ORDERS[kind]) + LAST_RESORT.get(kind, [])


# Without a clean checkpoint every retry is a full run from scratch: the decisive repairs
# first. No clean checkpoint mostly means the run failed in its first epoch (the first one
# is taken at its end), where the warmup rate is in effect: that rate goes down, as far as
# the seed's ladder of halvings would take it, in one launch; the main rate is left alone
# (cutting it 10x instead ended the demo at 0.928 test accuracy against the seed's 0.998).
# Then batch norm before each residual addition, the documented fix for the ELU ResNet
# block (Shah et al. 2016), and only then the rate's bracket. Clipping and SELU come after
# it: on the seed scenario both give a run that never explodes but trains at chance
# (measured: clip 1.0 -> test accuracy 0.108 after 5 epochs).
# lowest_warmup_lr applies only to a job with a warmup phase (warmup_epochs mapped and > 0):
# a script without one goes straight to the bracket.
# DECISIVE: the repairs before the rate search (masked_divergence goes on with them
# after a launch for a divergence that learned nothing).
DECISIVE = rungs("lowest_warmup_lr", "add_batch_norm")
FROM_SCRATCH: dict[Trouble, list[PolicyStep]] = {
    Trouble.divergence: DECISIVE
    + rungs(
        ("search_lr_down", 6),
        "clip_gradients",
        "use_selu",
        "longer_warmup",
        "use_relu",
        "use_tanh",
        "change_init",
    ),
}


def masked_divergence(state: State) -> list[PolicyStep]:
    """The decisive repairs (those not yet tried: the walk skips the rest) when the
    latest launch answered a divergence and learned nothing. It no longer diverged, but
    it did not train either: the divergence was masked, not mended. The built-in ReLU
    ResNet without batch norm at lr 0.1 was NotTrained after its warmup rate was lowered
    (seed 1), or after a cut of its rate (seed 2), and the plateau's order spent six
    launches on rates, Adam and a new init (4.65-4.73x, test accuracy 0.64 and 0.58)
    with batch norm, the next decisive repair, never reached."""
    runs = state.history.runs
    if len(runs) < 2:
        return []
    answered = runs[-2]  # the launch whose findings the latest one was made for
    if any(trouble(f, answered.spec) is Trouble.divergence for f in answered.findings):
        return list(DECISIVE)
    return []


# A spike that begins within this many updates after the warmup ends and the learning rate
# rises is the rate's doing, not the data's: rolling back and skipping batches only meets
# the same rate again (benchmarks/policy_comparison.py, late_spike: the spike two updates
# into a stage typed 10x too high came back after each rollback, or the rolled-back run
# trained to chance). Such a spike goes to the order's learning-rate fix at once.
RATE_RISE_REACH = 10


def after_rate_rise(state: State, finding: Finding) -> bool:
    """The finding's spike began within RATE_RISE_REACH updates after the epoch where the
    learning rate rises from the warmup rate (False when that is not known: a script
    that maps no warmup roles, a dataset of unknown size)."""
    spec, attempt = state.run_spec, state.current_attempt
    roles = ("warmup_epochs", "warmup_learning_rate", "learning_rate")
    if finding.step is None or attempt is None or not all(spec.has_role(r) for r in roles):
        return False
    per_epoch = spec.steps_per_epoch
    if per_epoch is None or spec.role("learning_rate") <= spec.role("warmup_learning_rate"):
        return False
    rise = spec.role("warmup_epochs") * per_epoch  # the last update at the warmup rate
    onset = update_of(finding.step, attempt.start_step, spec.skip_steps)
    return rise < onset <= rise + RATE_RISE_REACH


def first_cut_from_sound_weights(
    state: State, chosen: Strategy, clean_checkpoint: Checkpoint | None
) -> bool:
    """The run's first cut of the rate, warm-started from a sound checkpoint, is launched
    as it is, without probes. The model trained soundly up to that checkpoint, so the rate
    is near right and one cut is the likely fix; probes from trained weights would rank
    rates by a few updates, which favours rates too small (short-horizon bias, Wu et al.
    2018), and the losing ones cost more than a cut that fails: on
    benchmarks/policy_comparison.py's late and late_spike the probes took total/final from
    1.06x to 1.37x and from 1.04x to 1.59x, for the same final model. Should the cut
    diverge again, the next one is probed."""
    if not isinstance(chosen, SearchLRDown) or clean_checkpoint is None:
        return False
    return not any(a.strategy == chosen.name for a in state.history.attempts)


# Troubles a rule finds in the model itself, which a change of rate alone does not mend.
MODEL_TROUBLES = (Trouble.dead_units, Trouble.vanishing)


def model_trouble(state: State) -> Trouble | None:
    """The latest trouble of the model itself (MODEL_TROUBLES) a rule found on an attempt
    of this run: the built-in ReLU ResNet without batch norm was DyingRelu at update 5,
    then, after a new init, NotTrained, whose plateau order searched rates and the
    optimizer for four launches and ended with the dead units never mended."""
    for attempt in reversed(state.history.attempts):
        for found in attempt.findings:
            if (kind := trouble(found, attempt.spec)) in MODEL_TROUBLES:
                return kind
    return None


def blames_data(finding: Finding) -> bool:
    """The NaN guard traced the failure to particular samples (issue 6's data_problem)."""
    return getattr(finding, "data_problem", None) is not None


@register_policy
class AdaptivePolicy(Policy):
    """Per finding an ordered list, cheap first, skipping what failed; warm starts."""

    name = "adaptive"
    description = "per-finding strategy orders, cheap first, skip what failed, warm start"
    warm_start = True
    probes = True

    def orders(
        self, state: State, finding: Finding, clean_checkpoint: Checkpoint | None
    ) -> list[PolicyStep]:
        configured = state.policy_config or {}
        for key in (finding.rule, rule_class(finding, state.run_spec)):
            if key in configured:
                return list(configured[key])  # the user's order, as written
        kind = trouble(finding, state.run_spec)
        if clean_checkpoint is None and kind in FROM_SCRATCH:
            order = list(FROM_SCRATCH[kind])
        else:
            order = order_of(kind)
        if rule_class(finding, state.run_spec) == NOT_TRAINED and (
            diagnosed := model_trouble(state)
        ):
            # The verdict's NotTrained says only that nothing was learned; a rule of an
            # earlier attempt said why (its units died): that order first, then the plateau's.
            order = order_of(diagnosed) + order
        elif rule_class(finding, state.run_spec) == NOT_TRAINED:
            order = masked_divergence(state) + order
        if kind is Trouble.plateau and rate_ruled_out(state):
            order = RATE_RULED_OUT + order
        if kind is Trouble.divergence and blames_data(finding):
            order.insert(0, PolicyStep(strategy="drop_bad_samples", max_times=1))
        if (
            kind is Trouble.spike
            and clean_checkpoint is not None
            and not after_rate_rise(state, finding)
        ):
            # A late spike after a sound stretch: roll back past it first (twice at most);
            # one at a place already skipped escalates to the order below.
            order.insert(0, PolicyStep(strategy="rollback_and_skip", max_times=2))
        return order

    def decide(
        self, state: State, findings: list[Finding], clean_checkpoint: Checkpoint | None
    ) -> Decision:
        walks: dict[str, Walk] = {}
        # A change that made the last launch fail sooner is set back before the next one.
        if (undo := made_worse(state)) is not None:
            state = state.model_copy(update={"run_spec": undo.apply(state.run_spec)})
        for finding in findings or [Finding(rule="ExplodingTensor")]:
            walks[finding.rule] = result = walk(
                state, self.orders(state, finding, clean_checkpoint), findings
            )
            if (chosen := result.chosen) is not None:
                if (
                    trouble(finding, state.run_spec) is Trouble.plateau
                    and not isinstance(chosen, SearchLR)
                    and (reset := back_to_highest_plateau(state))
                ):
                    undo = reset if undo is None else undo.joined(reset)
                # A rate to search: a few rates of the bracket, probed side by side, so one
                # round of short probes does what a launch per rate would.
                # The verdict's question is about a run that learned: finer steps.
                if not isinstance(chosen, SearchLR) or first_cut_from_sound_weights(
                    state, chosen, clean_checkpoint
                ):
                    return Decision(chosen, undo=undo)
                fine = is_question(findings)
                spread = tuple(chosen.spread(state.run_spec, fine))
                return Decision(chosen, probe=spread, undo=undo)
        parts = [
            f"{rule}: tried or ruled out {'; '.join(w.skipped) or 'nothing'}"
            for rule, w in walks.items()
        ]
        why = f"policy 'adaptive' has no strategy left ({' | '.join(parts)})"
        return Decision.nothing_left(why)
