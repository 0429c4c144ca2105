"""report: write the run's HTML report (plots of every attempt) at the end of a flow."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from remedy.records.report import build_report


@task(cache_policy=NO_CACHE)
def report(run_dir: str) -> str:
    return str(build_report(run_dir))
