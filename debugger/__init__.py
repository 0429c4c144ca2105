"""remedy's open tensor debugger: capture (Hook, ZeroCodeCapture), store, analysis (Trial),
rules, evaluator.

Stands alone: no Prefect, nothing else of remedy. torch is imported only when a Hook is
built, so readers and the rule evaluator need numpy and safetensors only.
"""

from __future__ import annotations

from remedy.debugger.collections import CollectionSpec, ReductionConfig
from remedy.debugger.config import HookConfig, SaveConfig
from remedy.debugger.exceptions import (
    ConfigError,
    CorruptStepFile,
    DebuggerError,
    DebuggerWarning,
    InvalidWorker,
    StepNotYetAvailable,
    StepUnavailable,
    StoreFormatError,
    TensorUnavailable,
    TensorUnavailableForStep,
)
from remedy.debugger.hook import Hook
from remedy.debugger.modes import ModeKeys
from remedy.debugger.rules import RULES, Finding, Rule, get_rule, register_rule
from remedy.debugger.status import RuleStatus, RuleStatusRecord, read_statuses
from remedy.debugger.trial import TensorView, Trial, create_trial
from remedy.debugger.zero_code import Update, UpdateObserver, ZeroCodeCapture

__all__ = [
    "RULES",
    "ReductionConfig",
    "CollectionSpec",
    "ConfigError",
    "CorruptStepFile",
    "DebuggerError",
    "DebuggerWarning",
    "Finding",
    "Hook",
    "HookConfig",
    "InvalidWorker",
    "ModeKeys",
    "Rule",
    "RuleStatus",
    "RuleStatusRecord",
    "SaveConfig",
    "StepNotYetAvailable",
    "StepUnavailable",
    "StoreFormatError",
    "TensorUnavailable",
    "TensorUnavailableForStep",
    "TensorView",
    "Trial",
    "Update",
    "UpdateObserver",
    "ZeroCodeCapture",
    "create_trial",
    "get_rule",
    "read_statuses",
    "register_rule",
]
