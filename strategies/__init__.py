"""Remediation strategies (one small class per file) and the policies that order them."""

from remedy.strategies import (  # noqa: F401  (importing a strategy module registers it)
    add_batch_norm,
    add_dropout,
    add_weight_decay,
    change_init,
    change_optimizer,
    clip_gradients,
    drop_bad_samples,
    longer_warmup,
    lower_lr,
    lower_lr_10x,
    lower_warmup_lr,
    lowest_warmup_lr,
    raise_batch_size,
    raise_lr,
    rollback_and_skip,
    swap_activation,
)
from remedy.strategies.base import STRATEGIES, Strategy, get_strategy, register_strategy
from remedy.strategies.plan import plan_next
from remedy.strategies.policies import (
    POLICIES,
    Policy,
    check_policy_name,
    get_policy,
    register_policy,
)
from remedy.strategies.warm_start import Checkpoint, pick_checkpoint

__all__ = [
    "Checkpoint",
    "POLICIES",
    "STRATEGIES",
    "Policy",
    "Strategy",
    "check_policy_name",
    "get_policy",
    "get_strategy",
    "pick_checkpoint",
    "plan_next",
    "register_policy",
    "register_strategy",
]
