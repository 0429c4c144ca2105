"""What remedy knows of a job before it runs: the built-in job's facts, in one place.

A user's script is known through its run_spec: hyperparameter_roles (which flags a strategy
may change, where its outputs and warm starts go), metric_definitions, untrained_loss,
num_classes. The built-in job (remedy.training.train) is one job among them whose facts are
fixed and written here. Code that treats the two differently asks a run_spec's `job` for the
fact it needs, never for the entry point's name.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class JobTraits:
    reads_fields: bool
    """It receives the contract's fields (run_spec.learning_rate, ...) in a hyperparameters
    file; otherwise its own flags on its command line, as hyperparameter_roles maps them."""
    ours: bool
    """Part of remedy itself: allowed wherever remedy runs (no source dir to allow)."""
    reported_metrics: tuple[str, ...]
    """Final metrics it reports with no metric_definitions, worth a column of their own."""
    writes_into_job_folder: bool
    """It writes its outputs into the folder each job is given (no output_dir role needed)."""
    counts_on_from_warm_start: bool
    """A warm-started launch numbers its steps on from the checkpoint's (else from 0)."""
    passes_over_steps: bool
    """It can pass over windows of steps (skip_steps: rollback_and_skip); no flag can."""
    cross_entropy_over_classes: bool
    """Its loss is cross-entropy over its classes: untrained, ln(classes)."""


BUILTIN_JOB = JobTraits(
    reads_fields=True,
    ours=True,
    reported_metrics=("test:accuracy",),  # its losses are reported too: not worth a column
    writes_into_job_folder=True,
    counts_on_from_warm_start=True,
    passes_over_steps=True,
    cross_entropy_over_classes=True,
)

SCRIPT_JOB = JobTraits(
    reads_fields=False,
    ours=False,
    reported_metrics=(),
    writes_into_job_folder=False,
    counts_on_from_warm_start=False,  # the launcher counts a script's updates from 0
    passes_over_steps=False,
    cross_entropy_over_classes=False,  # unknown: run_spec.untrained_loss says
)
