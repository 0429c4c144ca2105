"""The NaN guard's one policy (training/nan_guard.py), which every job's guard follows: what
a bad update leads to in each mode, and the status it writes. The jobs' guards meet real
divergences in test_guard.py (the built-in job) and test_launch*.py (the launcher); here the
policy is told of bad updates directly, no job runs."""

import json
from pathlib import Path
from typing import Any

import pytest

from remedy.training.nan_guard import MAX_SKIPPED_UPDATES, Evidence, NanGuardPolicy
from remedy.training.script_guard import ScriptNanGuard


def status(folder: Path) -> dict[str, Any]:
    return json.loads((folder / "NonFiniteGradient.json").read_text())


@pytest.fixture
def stop_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "stop"
    monkeypatch.setenv("REMEDY_STOP_FILE", str(path))
    return path


def test_stop_stops_at_the_first_bad_update(tmp_path: Path, stop_file: Path) -> None:
    guard = NanGuardPolicy("stop", tmp_path / "status")
    assert guard.record_bad(7, Evidence(what="loss nan")) is True
    assert guard.stopped and guard.bad_updates == 1 and guard.first_bad_step == 7
    written = status(tmp_path / "status")
    assert written["RuleEvaluationStatus"] == "IssuesFound" and written["step"] == 7
    assert written["StatusDetails"] == (
        "1 non-finite update(s), latest at step 7: loss nan; update not applied, job stopped"
    )
    assert written["bad_batches"] == 1 and written["bundle"] is None
    assert json.loads(stop_file.read_text())["requested_by"] == "nan_guard"


def test_an_update_read_one_update_late_is_said_to_be_applied(
    tmp_path: Path, stop_file: Path
) -> None:
    """On a device the launcher reads each update one update late: the bad one has been
    applied when the guard stops the job, and its status must not say otherwise."""
    guard = NanGuardPolicy("stop", tmp_path / "status")
    assert guard.record_bad(7, Evidence(what="loss nan"), applied=True) is True
    assert status(tmp_path / "status")["StatusDetails"] == (
        "1 non-finite update(s), latest at step 7: loss nan; "
        "update applied (read one update late), job stopped before the next"
    )


def test_skip_goes_on_until_max_skipped_updates(tmp_path: Path, stop_file: Path) -> None:
    guard = NanGuardPolicy("skip", tmp_path / "status")
    for n in range(1, MAX_SKIPPED_UPDATES):
        assert guard.record_bad(10 * n) is False
        written = status(tmp_path / "status")
        assert written["RuleEvaluationStatus"] == "NoIssuesFound"
        assert written["bad_batches"] == n and written["step"] == 10 * n
        assert "training goes on (nan_guard skip)" in written["StatusDetails"]
        assert not stop_file.exists()
    assert guard.record_bad(10 * MAX_SKIPPED_UPDATES) is True
    written = status(tmp_path / "status")
    assert written["RuleEvaluationStatus"] == "IssuesFound"
    assert written["bad_batches"] == MAX_SKIPPED_UPDATES
    assert written["StatusDetails"].startswith(
        f"{MAX_SKIPPED_UPDATES} non-finite update(s), latest at step {10 * MAX_SKIPPED_UPDATES}"
    )
    assert guard.first_bad_step == 10 and stop_file.exists()


def test_a_skip_run_closes_with_its_final_word(tmp_path: Path, stop_file: Path) -> None:
    guard = NanGuardPolicy("skip", tmp_path / "status")
    keys = {"bundle": "/b", "localisation": "forward stem", "suspect_samples": [3]}
    guard.record_bad(4, Evidence(what="loss inf", notes=("repro bundle /b",), keys=keys))
    guard.record_bad(9, Evidence(what="loss nan"))
    guard.close(30)
    written = status(tmp_path / "status")
    assert written["RuleEvaluationStatus"] == "NoIssuesFound"
    assert written["step"] == 9 and written["steps_evaluated"] == 30 and written["bad_batches"] == 2
    assert written["StatusDetails"] == (
        "2 non-finite update(s), latest at step 9: loss nan; "
        "run ended, those updates skipped (nan_guard skip)"
    )
    assert not stop_file.exists()


def test_the_jobs_keys_and_notes_reach_the_status(tmp_path: Path, stop_file: Path) -> None:
    guard = NanGuardPolicy("stop", tmp_path / "status")
    keys = {
        "bundle": "/b",
        "localisation": "forward stem",
        "suspect_samples": [3],
        "suspect_shards": ["data_batch_2:3"],
        "data_problem": None,
    }
    guard.record_bad(4, Evidence(notes=("repro bundle /b", "first non-finite: stem"), keys=keys))
    written = status(tmp_path / "status")
    assert {key: written[key] for key in keys} == keys
    assert written["StatusDetails"] == (
        "1 non-finite update(s), latest at step 4: update not applied, job stopped; "
        "repro bundle /b; first non-finite: stem"
    )


def test_nothing_more_is_written_at_the_end_of_a_clean_or_stopped_run(
    tmp_path: Path, stop_file: Path
) -> None:
    clean = NanGuardPolicy("skip", tmp_path / "clean")
    clean.close(50)
    assert not (tmp_path / "clean").exists()
    stopped = NanGuardPolicy("stop", tmp_path / "stopped")
    stopped.record_bad(5)
    before = status(tmp_path / "stopped")
    stopped.close(5)
    assert status(tmp_path / "stopped") == before


def test_a_workers_skip_never_replaces_another_workers_stop(
    tmp_path: Path, stop_file: Path
) -> None:
    folder = tmp_path / "status"
    first = ScriptNanGuard("stop", folder, "worker_0")
    second = ScriptNanGuard("skip", folder, "worker_1")
    assert second.record_bad(2) is False
    assert status(folder)["StatusDetails"].startswith("worker_1: 1 non-finite update(s)")
    assert first.record_bad(3) is True
    assert second.record_bad(4) is False
    second.close(6)
    written = status(folder)
    assert written["RuleEvaluationStatus"] == "IssuesFound" and written["step"] == 3
    assert written["StatusDetails"].startswith("worker_0: 1 non-finite update(s)")
