"""store_report: put the run's report where any browser opens it (REMEDY_REPORTS_S3)."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from remedy.outlets.publish import run_name
from remedy.outlets.report_store import reports_store, upload_report
from remedy.tasks.retry import BACKEND_RETRIES


@task(cache_policy=NO_CACHE, **BACKEND_RETRIES)  # an outage of the store is retried
def store_report(report_dir: str, run_dir: str) -> str | None:
    """The presigned URL of the report uploaded to REMEDY_REPORTS_S3; None when that is not
    set. Raises when the upload fails (the caller falls back to the report's path)."""
    store = reports_store()
    if store is None:
        return None
    return upload_report(report_dir, run_name(run_dir), store)
