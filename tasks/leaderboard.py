"""Tasks of the search: open its folder, and end it with its leaderboard."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from prefect import task
from prefect.artifacts import create_table_artifact
from prefect.cache_policies import NO_CACHE

from remedy.outlets.leaderboard import (
    leaderboard_row,
    rank,
    search_message,
    summary,
    write_leaderboard,
)
from remedy.records.logs import task_logger
from remedy.records.run_folder import default_run_dir
from remedy.tasks.notify import tell


@task(cache_policy=NO_CACHE)
def open_search(search_dir: str | None, flow_run_name: str) -> str:
    """The search's folder: default <REMEDY_RUNS_DIR or ./runs>/search-<time>-<flow run>."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return search_dir or default_run_dir(f"search-{stamp}-{flow_run_name}")


@task(cache_policy=NO_CACHE)
def publish_leaderboard(
    search_dir: str,
    candidates: dict[int, tuple[str, dict[str, Any]]],
    notify_config: str | None = None,
    notify_block: str | None = None,
) -> list[dict[str, Any]]:
    """Rank the candidates (number -> its run folder and what its flow run reported), write
    leaderboard.json and .md, show the table in the UI and tell people the best (as the
    remediation's messages are told: each target retried, linking this flow run)."""
    rows = rank(
        [
            leaderboard_row(number, run_dir, flow_run)
            for number, (run_dir, flow_run) in candidates.items()
        ]
    )
    write_leaderboard(search_dir, rows)
    create_table_artifact(
        [table_row(row) for row in rows],
        key="remedy-search-leaderboard",
        description=f"Leaderboard of {search_dir}",
    )
    task_logger().info("search finished: %s", summary(rows))
    tell(search_message(rows, search_dir), notify_config, notify_block)
    return rows


def table_row(row: dict[str, Any]) -> dict[str, Any]:
    """A leaderboard row as the UI's table shows it: its metrics as columns of their own."""
    flat = {k: v for k, v in row.items() if k not in ("run_dir", "metrics")}
    metrics = row.get("metrics", {})
    return flat | {name: value for name, value in metrics.items() if name not in flat}
