"""The job's environment: the names every job gets, in one place (docs/job-contract.md).

Backends set them (remedy.jobs), the launcher and the built-in job read them
(remedy.training). The cloud training toolkit's names come first, so a script written for
the cloud service runs unchanged; then ours.
"""

from __future__ import annotations

from collections.abc import Mapping

from remedy.state_schema.private import PRIVATE_FIELDS

# --- the cloud service's training toolkit ------------------------------------------
SM_MODEL_DIR_ENV = "SM_MODEL_DIR"  # <job>/model: the final model
SM_OUTPUT_DATA_DIR_ENV = "SM_OUTPUT_DATA_DIR"  # <job>/output: other outputs
SM_HPS_ENV = "SM_HPS"  # JSON object of the job's hyperparameters
SM_HP_PREFIX = "SM_HP_"  # + NAME upper-cased: one hyperparameter (flags.environment_value)
SM_NUM_GPUS_ENV = "SM_NUM_GPUS"
SM_NUM_CPUS_ENV = "SM_NUM_CPUS"
SM_CURRENT_HOST_ENV = "SM_CURRENT_HOST"
SM_HOSTS_ENV = "SM_HOSTS"  # JSON list of host names
SM_TRAINING_ENV_ENV = "SM_TRAINING_ENV"  # JSON of all of the above
CURRENT_HOST = "algo-1"  # the toolkit's name of the first (here: the only) host

# --- ours --------------------------------------------------------------------------
OUTPUT_DIR_ENV = "REMEDY_OUTPUT_DIR"  # the job folder: progress.json, metrics.jsonl, result.json
CHECKPOINT_DIR_ENV = "REMEDY_CHECKPOINT_DIR"  # <job>/checkpoints; a warm start is placed there
DEBUGGER_CONFIG_ENV = "REMEDY_DEBUGGER_CONFIG"  # = remedy.debugger.config.CONFIG_ENV_VAR
STOP_FILE_ENV = "REMEDY_STOP_FILE"  # its appearance asks the job to stop
RULE_STATUS_DIR_ENV = "REMEDY_RULE_STATUS_DIR"  # where the NaN guard writes its rule status
NAN_GUARD_ENV = "REMEDY_NAN_GUARD"  # run_spec.nan_guard: stop | skip | off
MAX_UPDATES_ENV = "REMEDY_MAX_UPDATES"  # run_spec.max_updates: the job stops itself after them
# run_spec.hold_by_epochs: the job holds to be asked once it measured one of them
HOLD_EPOCHS_ENV = "REMEDY_HOLD_BY_EPOCHS"
# Where the backend can continue a job (local, Slurm): at its bound the job holds instead,
# until this file appears (it trains on: a probe kept as the full run) or a stop is asked.
CONTINUE_FILE_ENV = "REMEDY_CONTINUE_FILE"
# A continue file may name a further bound (a probe that passed its rung): the job takes the
# file away, trains on to that many updates of its launch and holds there again.
CONTINUE_UNTIL_KEY = "max_updates"
# run_spec's config keys (config_keys.py), JSON {FILE: {dotted.key: value}}: the launcher
# writes the files' copies with them into CONFIG_COPIES_DIR of the job's output folder.
CONFIG_EDITS_ENV = "REMEDY_CONFIG_EDITS"
CONFIG_COPIES_DIR = "config"
TORCH_THREADS_ENV = "REMEDY_TORCH_THREADS"  # torch.set_num_threads
THREAD_ENVS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")  # the same count, read at torch's import

# What a job writes in its output folder (docs/job-contract.md); the backends read them.
PROGRESS_FILE = "progress.json"  # the latest step: the monitor's live view
METRICS_FILE = "metrics.jsonl"  # one line per step (and per epoch, the built-in job's)
RESULT_FILE = "result.json"  # at the end: Completed or Stopped, steps, final losses
RULE_STATUS_DIR = "rule_status"  # the NaN guard's rule status, unless REMEDY_RULE_STATUS_DIR

# The module that runs a user's script or module with zero-code capture:
#   python -m remedy.training.launch SCRIPT.py ARGS...  |  ... -m MODULE ARGS...
LAUNCHER_MODULE = "remedy.training.launch"
LAUNCHER_LOG_PREFIX = "remedy launch:"  # its own lines in the job's log (not the script's)

# --- never passed to a job ---------------------------------------------------------
SECRET_ENVS = (
    "REMEDY_NOTIFY_URLS",  # remedy.outlets.notifications
    "REMEDY_NOTIFY_SECRET",
    *PRIVATE_FIELDS.values(),  # the flow's role and bucket (private.py)
)
SECRET_MARKERS = ("TOKEN", "SECRET", "PASSWORD", "API_KEY")  # in a name, any case
# Cloud credentials stay: a job may read from or write to the bucket.
KEPT_CREDENTIALS = frozenset(
    {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"}
)


def is_secret(name: str) -> bool:
    """True for a variable a job must not see (notification targets, tokens, passwords)."""
    upper = name.upper()
    if upper in KEPT_CREDENTIALS:
        return False
    return upper in SECRET_ENVS or any(marker in upper for marker in SECRET_MARKERS)


def without_secrets(environ: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in environ.items() if not is_secret(name)}
