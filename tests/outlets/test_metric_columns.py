"""The tables show the metrics a run has: a language model's perplexity, the built-in job's
test accuracy; the roles a script maps, never ResNet columns that are always empty for it."""

from __future__ import annotations

import json
from pathlib import Path

from remedy.cli.report_commands import comparison
from remedy.outlets.leaderboard import leaderboard_markdown, leaderboard_row
from remedy.outlets.messages import attempt_table, final_message, text_table
from remedy.outlets.metric_columns import metric_names
from remedy.outlets.report import build_report, read_curve, run_figures
from remedy.state_schema import JobStatus, RunSpec, State, save_state
from remedy.state_schema.transitions import begin_attempt, update_current_attempt

PPL = {"name": "test:perplexity", "regex": r"test ppl ([0-9.eE+-]+)"}


def word_lm(**fields: object) -> RunSpec:
    return RunSpec.model_validate(
        {
            "source_dir": ".",
            "entry_point": "main.py",
            "hyperparameters": {"lr": 20, "clip": 0.25},
            "hyperparameter_roles": {"learning_rate": "lr", "grad_clip_norm": "clip"},
            "metric_definitions": [PPL],
            **fields,
        }
    )


def ended(state: State, job: str, metrics: dict[str, float], **fields: object) -> State:
    done = {"outcome": JobStatus.Completed, "steps_run": 40, "initial_loss": 5.7}
    done |= {"final_loss": 4.9, "metrics": metrics}
    return update_current_attempt(begin_attempt(state, job), **(done | fields))


def language_model_run() -> State:
    state = State(run_spec=word_lm())
    # the first job was stopped before it printed its perplexity
    state = ended(state, "lm-1", {"train:loss": 7.5}, outcome=JobStatus.Stopped)
    return ended(state, "lm-2", {"train:loss": 4.873, "test:perplexity": 56.1})


def test_a_script_shows_its_own_metrics_and_the_roles_it_maps() -> None:
    state = language_model_run()
    assert metric_names(state) == ["test:perplexity", "train:loss"]
    header, first, second = (line.split() for line in attempt_table(state).splitlines())
    assert header == ["#", "strategy", "lr", "steps", "finding", "outcome"] + [
        "test:perplexity",
        "train:loss",
    ]
    assert first[-2:] == ["-", "7.5"] and second[-2:] == ["56.1", "4.873"]
    _, body = final_message(state)
    assert "final metrics: test:perplexity 56.1, train:loss 4.873." in body


def test_a_success_criterion_names_a_column_even_before_it_is_reported() -> None:
    criterion = {"metric": "valid:accuracy", "op": ">=", "value": 0.5}
    state = State(run_spec=word_lm(success_criteria=[criterion]))
    assert metric_names(state) == ["test:perplexity", "valid:accuracy"]


def test_the_built_in_job_keeps_its_columns() -> None:
    state = ended(State(), "resnet", {"test:accuracy": 0.998, "test:loss": 0.01, "train:loss": 0.0})
    header, row = (line.split() for line in attempt_table(state).splitlines())
    assert header == ["#", "strategy", "warmup_lr", "lr", "bn", "steps", "finding", "outcome"] + [
        "test:accuracy"
    ]
    assert row[-1] == "0.998"


def test_compare_and_the_report_show_the_scripts_metrics(tmp_path: Path) -> None:
    lm, resnet = tmp_path / "lm", tmp_path / "resnet"
    save_state(lm / "state.json", language_model_run())
    save_state(resnet / "state.json", ended(State(), "resnet", {"test:accuracy": 0.9}))
    table = text_table(comparison([run_figures(lm), run_figures(resnet)]))
    rows = {line.split()[0]: line.split()[1:] for line in table.splitlines()[1:]}
    assert rows["test:perplexity"] == ["56.1", "-"]
    assert rows["train:loss"] == ["4.873", "-"]
    assert rows["test:accuracy"] == ["-", "0.9"]

    # the job's metric records, as the local backend keeps them, are the report's curves
    job = lm / "jobs" / "lm-2"
    job.mkdir(parents=True)
    records = [{"type": "step", "step": s, "loss": 5.0 - s / 10} for s in range(1, 41)]
    records += [{"type": "metric", "name": "test:perplexity", "value": 56.1, "step": 40}]
    (job / "log_metrics.jsonl").write_text(json.dumps(records[-1]) + "\n")
    (job / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[:-1]))
    curve = read_curve(lm, language_model_run().history.attempts[-1])
    assert len(curve.steps) == 40 and curve.metrics["test:perplexity"].values == [56.1]

    summary = (build_report(lm) / "summary.md").read_text()
    assert "final metrics: test:perplexity 56.1, train:loss 4.873" in summary
    assert "| loss | test:perplexity | train:loss | outcome |" in summary
    assert "acc" not in summary.split("\n| 1 |")[0]  # no ResNet column
    html = (lm / "report" / "index.html").read_text()
    assert "<th>test:perplexity</th>" in html and "loss and metrics per attempt" in html


def test_the_leaderboard_shows_the_metrics_candidates_have(tmp_path: Path) -> None:
    criterion = {"metric": "test:loss", "op": "<", "value": 1.0}
    state = ended(
        State(run_spec=RunSpec(success_criteria=[criterion])),
        "c1",
        {"test:accuracy": 0.9, "test:loss": 0.3},
        final_accuracy=0.9,
    )
    save_state(tmp_path / "c1" / "state.json", state)
    row = leaderboard_row(1, str(tmp_path / "c1"))
    assert row["accuracy"] == 0.9 and row["metrics"] == {"test:loss": 0.3}
    header, _, line = leaderboard_markdown([row]).splitlines()
    assert "| accuracy | test:loss | steps_used |" in header and "| 0.9 | 0.3 | 40 |" in line
