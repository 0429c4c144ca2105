"""Metric definitions on a local job: the supervisor turns the lines of the training log into
metric records, and describe() reports the last value of each as a final metric."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remedy.jobs.local import LocalBackend
from remedy.jobs.local.log_metrics import LogMetrics, final_values, read_records
from remedy.state_schema import JobStatus, MetricDefinition, RunSpec
from tests.helpers.local_jobs import wait_final

DEFINITIONS = [
    MetricDefinition(name="valid:perplexity", regex=r"valid ppl ([0-9.eE+-]+)"),
    MetricDefinition(name="test:perplexity", regex=r"test ppl ([0-9.eE+-]+)"),
]


def follower(tmp_path: Path) -> LogMetrics:
    return LogMetrics(
        DEFINITIONS,
        log=tmp_path / "training.log",
        out=tmp_path / "log_metrics.jsonl",
        progress=tmp_path / "progress.json",
    )


def write(path: Path, text: str) -> None:
    with path.open("a") as handle:
        handle.write(text)


def found(tmp_path: Path) -> list[tuple[str, float | None, int | None]]:
    records = read_records(tmp_path / "log_metrics.jsonl")
    return [(r["name"], r["value"], r["step"]) for r in records]


def test_each_matching_line_is_a_record_at_the_step_the_job_had_reached(tmp_path: Path) -> None:
    metrics, log = follower(tmp_path), tmp_path / "training.log"
    metrics.scan(now=0.0)  # no log yet: nothing
    write(log, "epoch 1 valid ppl 181.3\nepoch 1 batch 50 loss 5.1\n")
    metrics.scan(now=1.0)
    assert found(tmp_path) == [("valid:perplexity", 181.3, None)]  # before any progress
    (tmp_path / "progress.json").write_text(json.dumps({"step": 40, "loss": 5.0}))
    write(log, "epoch 2 valid ppl 148.4 | test ppl 1")  # a line being written: not yet
    metrics.scan(now=2.0)
    assert len(found(tmp_path)) == 1
    write(log, "34.3\n")  # its end: one line, two metrics on it
    metrics.scan(now=2.1)  # too soon after the last look
    assert len(found(tmp_path)) == 1
    metrics.scan(now=3.0)
    assert found(tmp_path)[1:] == [("valid:perplexity", 148.4, 40), ("test:perplexity", 134.3, 40)]


def test_carriage_returns_end_lines_and_finish_reads_the_last_one(tmp_path: Path) -> None:
    metrics, log = follower(tmp_path), tmp_path / "training.log"
    write(log, "valid ppl 300\rvalid ppl 200\r\nvalid ppl 1e999\ntest ppl 9" + "x" * 5000)
    metrics.scan(now=0.0)
    assert [value for _, value, _ in found(tmp_path)] == [300.0, 200.0, None]  # 1e999 is inf: null
    metrics.finish()  # the job has ended: its unterminated last line counts
    assert found(tmp_path)[-1] == ("test:perplexity", 9.0, None)
    metrics.finish()
    assert len(found(tmp_path)) == 4  # nothing twice


def test_the_last_finite_value_of_each_metric_is_final() -> None:
    records = [
        {"type": "step", "step": 1, "loss": 2.0},
        {"type": "metric", "name": "a", "value": 3.0},
        {"type": "metric", "name": "a", "value": 2.5},
        {"type": "metric", "name": "b", "value": 1.0},
        {"type": "metric", "name": "b", "value": None},  # its last value is not finite
    ]
    assert final_values(records) == {"a": 2.5}


def test_a_job_reports_the_metrics_its_log_and_result_show(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "run")
    spec = RunSpec(
        entry_point="tests.jobs.entry_points.prints_metrics",
        rules=[],
        metric_definitions=DEFINITIONS,
    )
    backend.launch("lm", spec)
    snapshot = wait_final(backend, "lm")
    assert snapshot.status is JobStatus.Completed
    assert snapshot.final_metrics == {
        "train:loss": 0.5,  # result.json's fixed key
        "bleu": 21.5,  # the script's own result.json "metrics"
        "valid:perplexity": 140.0,  # the log's last value wins over result.json's
        "test:perplexity": 134.3,  # the last line, without a newline, too
    }
    curve = [r for r in backend.metrics("lm") if r.get("type") == "metric"]
    assert [(r["name"], r["value"]) for r in curve] == [
        ("valid:perplexity", 181.3),
        ("valid:perplexity", 148.4),
        ("valid:perplexity", 140.0),
        ("test:perplexity", 134.3),
    ]
    assert all(r["step"] in (None, 5, 10) for r in curve)


def test_a_job_without_definitions_has_no_log_metrics(tmp_path: Path) -> None:
    backend = LocalBackend(tmp_path / "run")
    spec = RunSpec(entry_point="tests.jobs.entry_points.prints_metrics", rules=[])
    backend.launch("lm", spec)
    snapshot = wait_final(backend, "lm")
    assert "test:perplexity" not in snapshot.final_metrics
    assert not backend.paths("lm").log_metrics.exists()


@pytest.mark.adversarial("fault injection", fails_as="hung")
def test_a_catastrophic_metric_regex_is_given_up_on_and_the_job_ends(tmp_path: Path) -> None:
    """Against 34 a's and '!', (a+)+$ (the issue's) and (a|aa)+$ would take hours in re.
    Matched under a time limit, the first is no trouble and the second is given up on for
    the job, saying so; the other definitions still count."""
    backend = LocalBackend(tmp_path / "run")
    nested = MetricDefinition(name="nested", regex=r"(a+)+$")
    alternation = MetricDefinition(name="alternation", regex=r"(a|aa)+$")
    spec = RunSpec(
        entry_point="tests.jobs.entry_points.prints_evil_line",
        rules=[],
        metric_definitions=[nested, alternation, DEFINITIONS[0]],
    )
    backend.launch("evil", spec)
    snapshot = wait_final(backend, "evil", timeout=300)  # a hang guard: it ends in seconds
    assert snapshot.status is JobStatus.Completed
    assert snapshot.final_metrics["valid:perplexity"] == 12.5
    [error] = [r for r in backend.metrics("evil") if r.get("type") == "metric_error"]
    assert error["name"] == "alternation" and "backtracks catastrophically" in error["error"]
