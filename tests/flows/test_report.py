"""remedy report / remedy compare on a real small run (explosion, then batch norm)."""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from remedy.cli import main
from remedy.debugger import create_trial
from remedy.flows.remediate import RemediateSettings, remediate
from remedy.outlets.report import build_report, layer_grad_norms, read_curve, run_figures
from remedy.state_schema import State, load_state, save_state
from tests.flows.specs import tiny_spec

PNG = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


@pytest.fixture(scope="module")
def real_run(prefect_api_url: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("run")
    spec = tiny_spec(warmup_learning_rate=0.003125, num_epochs=2)
    remediate(
        state=State(run_spec=spec, policy="seed"),  # the seed ladder: batch norm next
        run_dir=str(run_dir),
        settings=RemediateSettings(poll_interval_s=0.5),
        return_state=True,  # the report is about the run folder, clean or not
    )
    return run_dir


@pytest.mark.slow
def test_report_writes_html_with_plots_and_a_markdown_summary(real_run: Path) -> None:
    state = load_state(real_run / "state.json")
    first, second = state.history.attempts
    assert main(["report", str(real_run)]) == 0

    html = (real_run / "report" / "index.html").read_text()
    images = PNG.findall(html)
    # loss + accuracy, the gradients' agreement, timeline, and gradient norms per layer for
    # both attempts
    assert len(images) == 5
    assert all(base64.b64decode(data).startswith(b"\x89PNG") for data in images)
    assert "gradient norm per layer, #1 initial" in html
    assert "timeline of findings and strategies" in html
    assert "gradient agreement per attempt (what the verdict asks on)" in html
    assert "add_batch_norm" in html and first.findings[0].rule in html
    assert "arn:" not in html

    summary = (real_run / "report" / "summary.md").read_text()
    total = first.steps_run + second.steps_run
    assert f"training steps: {total} in all, {second.steps_run} in the final run" in summary
    assert "| 2 | add_batch_norm |" in summary and "add_batch_norm: 0 -> 1" in summary
    assert f"{first.findings[0].rule} @ step {first.findings[0].step}" in summary


@pytest.mark.slow
def test_report_data_come_from_the_jobs(real_run: Path) -> None:
    state = load_state(real_run / "state.json")
    first, second = state.history.attempts
    curve = read_curve(real_run, second)
    assert len(curve.steps) == second.steps_run == 16
    assert len(curve.metrics["test:accuracy"].values) == 2  # one per epoch
    norms = layer_grad_norms(real_run, second)
    assert len(norms) > 10 and "gradient/stem.weight" in norms
    # Norms are those of the stored tensors, every debugger_save_interval (2) steps.
    trial = create_trial(real_run / "jobs" / second.job_name / "tensors")
    steps = sorted(norms["gradient/stem.weight"])
    assert len(steps) >= 6 and all(b - a == 2 for a, b in zip(steps, steps[1:], strict=False))
    value = trial.tensor("gradient/stem.weight").value(steps[-1])
    expected = np.linalg.norm(np.asarray(value, dtype=np.float64))
    assert norms["gradient/stem.weight"][steps[-1]] == pytest.approx(expected)
    figures = run_figures(real_run)
    assert (figures.attempts, figures.clean, figures.final_steps) == (2, True, 16)
    assert figures.total_steps == first.steps_run + 16


@pytest.mark.slow
def test_compare_puts_runs_side_by_side(
    real_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other-run"
    other.mkdir()
    state = load_state(real_run / "state.json")
    save_state(other / "state.json", state.model_copy(update={"policy": "adaptive"}))
    out_md = tmp_path / "compare.md"
    assert main(["compare", str(real_run), str(other), "--markdown", str(out_md)]) == 0
    printed = capsys.readouterr().out
    policy_row = next(line for line in printed.splitlines() if line.startswith("policy"))
    assert policy_row.split()[1:] == ["seed", "adaptive"]
    assert "total / final" in printed and "final run steps" in printed
    assert out_md.read_text().startswith(f"|  | {real_run.name} | other-run |")


def test_bad_run_dirs_are_usage_errors(tmp_path: Path) -> None:
    for argv in (["report", str(tmp_path)], ["compare", str(tmp_path)]):
        out = subprocess.run(
            [sys.executable, "-m", "remedy", *argv], capture_output=True, text=True
        )
        assert out.returncode == 2 and "no state.json" in out.stderr


def test_report_of_a_run_without_jobs_still_writes(tmp_path: Path) -> None:
    save_state(tmp_path / "state.json", State())
    out = build_report(tmp_path)
    assert (out / "summary.md").read_text().startswith(f"# remedy run {tmp_path.name}")
    shutil.rmtree(out)


def test_report_text_says_only_what_a_finding_knows_and_renders_code(tmp_path: Path) -> None:
    """A finding without a tensor has no "on None"; the HTML has no literal backticks; the
    timeline's attempts are whole numbers. (A state written here: no job ran.)"""
    from remedy.outlets.report import timeline_figure
    from remedy.state_schema import Finding, JobStatus
    from remedy.state_schema.transitions import begin_attempt, update_current_attempt

    state = State()
    for number in (1, 2, 3):
        state = begin_attempt(state, f"job-{number}")
        finding = Finding(rule="NonFiniteGradient", step=3, tensor=None)
        state = update_current_attempt(
            state, findings=[finding], outcome=JobStatus.Stopped, steps_run=4
        )
    save_state(tmp_path / "state.json", state)
    out = build_report(tmp_path)
    html = (out / "index.html").read_text()
    assert "NonFiniteGradient @ step 3<" in html and "on None" not in html
    assert "`" not in html and "<code>" in html

    (axes,) = timeline_figure(state).axes
    assert list(axes.get_yticks()) == [1, 2, 3]
