"""report: write the run's HTML report (plots of every attempt) at the end of a flow."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from remedy.outlets.messages import redact
from remedy.outlets.report import build_report
from remedy.records.logs import task_logger


@task(cache_policy=NO_CACHE)
def report(run_dir: str) -> str | None:
    """The report folder, or None: a run never fails for want of its report."""
    try:
        return str(build_report(run_dir))
    except Exception as error:
        task_logger().warning("no report: %s", redact(f"{type(error).__name__}: {error}"))
        return None
