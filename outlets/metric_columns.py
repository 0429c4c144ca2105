"""Which metrics a run's tables show: the ones the run has, under the names its jobs report.

A script shows its own metrics: those its run_spec defines (metric_definitions), those its
success criteria name, then whatever else its jobs reported (the launcher's train:loss, the
script's result.json "metrics"). The built-in job shows its test accuracy, its headline
figure, then any metric it was asked to define or reach. A job that did not report a metric
shows "-" for it. `remedy status`, `compare`, the report and the leaderboard all use these.
"""

from __future__ import annotations

from collections.abc import Iterable

from remedy.state_schema import RunSpec, State

BUILTIN_METRICS = ("test:accuracy",)


def metric_names(state: State) -> list[str]:
    """The run's metric columns, in order, each once."""
    attempts = state.history.attempts
    specs: list[RunSpec] = [attempt.spec for attempt in attempts] or [state.run_spec]
    names = list(specs[0].job.reported_metrics)
    names += [d.name for spec in specs for d in spec.metric_definitions]
    names += [criterion.metric for spec in specs for criterion in spec.success_criteria]
    if not specs[0].job.reads_fields:  # a script's own figures (the built-in job's: its losses)
        names += sorted({name for attempt in attempts for name in attempt.metrics})
    return unique(names)


def unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))
