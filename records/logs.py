"""The run logger inside Prefect runs, a plain logger when a task body runs on its own; and
the task runs' log without Prefect's line for every task run that completed."""

from __future__ import annotations

import logging

from prefect import get_run_logger
from prefect.exceptions import MissingContextError


def task_logger() -> logging.Logger | logging.LoggerAdapter:
    try:
        return get_run_logger()
    except MissingContextError:
        return logging.getLogger("remedy")


class HideCompletedTaskRuns(logging.Filter):
    """Prefect logs "Finished in state Completed()" for every task run, most of a run's log;
    a task run that failed, crashed or is retried still says so."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Finished in state Completed(")


def quiet_task_runs() -> None:
    """Install the filter on the task runs' logger (console and UI), once per process."""
    logger = logging.getLogger("prefect.task_runs")
    if not any(isinstance(f, HideCompletedTaskRuns) for f in logger.filters):
        logger.addFilter(HideCompletedTaskRuns())
