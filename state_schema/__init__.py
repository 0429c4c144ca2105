"""Pydantic models of the state payload and of the training contract (the hyperparameters a
job receives); stands alone (no other package of ours)."""

from remedy.state_schema.checkpoints import CHECKPOINT_META_FILE, Checkpoint
from remedy.state_schema.entry_points import BUILTIN_ENTRY_POINT
from remedy.state_schema.flags import flag_arguments
from remedy.state_schema.hyperparameters import (
    SYNTHETIC_TEST_SAMPLES,
    SYNTHETIC_TRAIN_SAMPLES,
    Activation,
    Hyperparameters,
)
from remedy.state_schema.io import (
    PayloadError,
    hyperparameters_from_document,
    load_hyperparameters,
    load_state,
    payload_json,
    payload_schema,
    save_state,
    state_from_document,
    write_atomic,
)
from remedy.state_schema.metric_definitions import MetricDefinition
from remedy.state_schema.models import (
    DEFAULT_POLICY,
    NOT_TRAINED,
    Attempt,
    AttemptKind,
    AttemptResult,
    Budgets,
    DataProblem,
    Finding,
    History,
    JobStatus,
    NextAction,
    Payload,
    PlannedChange,
    PolicyStep,
    ProbeCandidate,
    ResultKind,
    RuleSpec,
    RuleStatus,
    RunSpec,
    State,
    exploding_tensor_rule,
)
from remedy.state_schema.roles import ROLES
from remedy.state_schema.run_spec import SuccessCriterion

__all__ = [
    "BUILTIN_ENTRY_POINT",
    "CHECKPOINT_META_FILE",
    "DEFAULT_POLICY",
    "ROLES",
    "SYNTHETIC_TEST_SAMPLES",
    "SYNTHETIC_TRAIN_SAMPLES",
    "Activation",
    "Attempt",
    "AttemptKind",
    "AttemptResult",
    "ProbeCandidate",
    "ResultKind",
    "Budgets",
    "Checkpoint",
    "DataProblem",
    "NOT_TRAINED",
    "Finding",
    "History",
    "Hyperparameters",
    "JobStatus",
    "MetricDefinition",
    "NextAction",
    "Payload",
    "PayloadError",
    "PlannedChange",
    "PolicyStep",
    "RuleSpec",
    "RuleStatus",
    "RunSpec",
    "State",
    "SuccessCriterion",
    "exploding_tensor_rule",
    "flag_arguments",
    "hyperparameters_from_document",
    "load_hyperparameters",
    "load_state",
    "payload_json",
    "payload_schema",
    "save_state",
    "state_from_document",
    "write_atomic",
]
