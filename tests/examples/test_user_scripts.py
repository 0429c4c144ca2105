"""Users' own scripts, unmodified, under `remedy run`: real processes, real dynamics.

examples/blobs/train.py (cloud script-mode style: --learning-rate, torch.optim, gradient
accumulation, SM_MODEL_DIR; fp32 and bf16 autocast) explodes for real at --learning-rate 5
and is repaired through its own flag. examples/word_lm/main.py (PyTorch's classic
language-model style: --lr, --clip, manual SGD, torch.save(model)) trains cleanly at its
defaults, with the perplexity it prints as its metric (metric_definitions), shown by
`remedy status`, `compare` and `report` and judged by its success criterion; at --lr 1000
it completes with a finite loss far above where it started, which is not a clean run.
examples/ddp/train.py (PyTorch's DDP tutorial style) runs as two torchrun processes, stops
whole on its real divergence and is repaired. examples/tabular/train.py (a CSV, a
DataLoader, Adam under OneCycleLR, early stopping) at a max_lr 16,000x its own is repaired
by the rate search from the rate its ramp had reached, and its run, whose loss speeds up
as the schedule anneals the rate, is called clean. examples/warmup_finetune/train.py (a
step budget, a linear warmup over a third of it) far too hot is repaired in one relaunch:
its probes, all on their ramp, do not send a rate that has not held to its peak.
examples/vae/train.py counts epochs: at a rate far too small it is asked at an eighth of
its length, measured from its DataLoader's first pass. examples/digits/main.py
(PyTorch's MNIST example style) prints its accuracy as a percentage, read as a fraction
where its definition says so; at 1/1000 of its rate its tiny updates say the rate is too
small where its gradients, under dropout, cannot. examples/signals/run_training.py (a
Trainer class on RMSprop) at its default rate is held at half its length and asked there.
examples/yaml_config/train.py reads every setting from a YAML file; far too hot there, it
is repaired through the file's key.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from remedy.state_schema import (
    AttemptKind,
    JobStatus,
    ResultKind,
    exploding_tensor_rule,
    load_state,
)
from tests.conftest import REPO
from tests.helpers.user_scripts import remedy_run

pytestmark = pytest.mark.slow
EXAMPLES = REPO / "examples"


@pytest.mark.parametrize("bf16", [False, True], ids=["fp32", "bf16-autocast"])
def test_an_exploding_script_is_repaired_through_its_own_flag(
    tmp_path: Path, prefect_api_url: str, bf16: bool
) -> None:
    spec = {
        "base_job_name": "blobs",
        "source_dir": str(EXAMPLES / "blobs"),
        "entry_point": "train.py",
        "hyperparameters": {"learning-rate": 5, "epochs": 2, "accumulate": 2, "bf16": bf16},
        "bare_flags": ["bf16"],  # argparse's store_true: --bf16, or nothing
        "hyperparameter_roles": {"learning_rate": "learning-rate"},
        # The seed's one rule: this test is about the launcher's NaN guard under AMP; the
        # default set's DivergingLoss may see the loss climb before anything is non-finite.
        "rules": [exploding_tensor_rule().model_dump(mode="json")],
    }
    code, output, run_dir = remedy_run(
        spec, tmp_path, prefect_api_url, "--policy", "adaptive", "--probe-steps", "0"
    )  # no probes: this is about the script's own repair path
    assert code == 0, output
    state = load_state(run_dir / "state.json")
    first, second = state.history.attempts
    # the NaN guard of the launcher saw the real non-finite gradients and stopped the job
    assert first.outcome is JobStatus.Stopped
    assert "NonFiniteGradient" in [f.rule for f in first.findings]
    assert second.strategy == "search_lr_down"
    assert second.changes == {"hyperparameters.learning-rate": [5, 0.5]}
    assert second.spec.script_hyperparameters["learning-rate"] == 0.5
    assert second.outcome is JobStatus.Completed and not second.findings
    assert second.steps_run == 2 * 2048 // 32 // 2  # updates, not backward passes
    assert second.final_loss < 0.5 * second.initial_loss
    job = run_dir / "jobs" / second.job_name
    assert (job / "model" / "model.pt").is_file()  # the script saved to SM_MODEL_DIR
    assert "completed: the job finished" in state.end_reason


def remedy(*argv: str, cwd: Path) -> str:
    """A remedy command that reads run folders (no Prefect needed): its output."""
    done = subprocess.run(
        [sys.executable, "-m", "remedy", *argv], cwd=cwd, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def columns(table: str) -> dict[str, list[str]]:
    """A printed attempt table as column name -> its cells (names and cells hold no spaces)."""
    header, *rows = (line.split() for line in table.strip().splitlines())
    return {name: [row[i] for row in rows] for i, name in enumerate(header)}


def word_lm_spec(tmp_path: Path, name: str, **flags: float) -> dict:
    """The classic LM script on a corpus generated in tmp_path, for one epoch, saving its
    model there (not into the example's folder): its run_spec, its flags over these."""
    data = tmp_path / "data"
    corpus = [sys.executable, str(EXAMPLES / "word_lm" / "generate_corpus.py"), "--out", str(data)]
    subprocess.run(corpus, check=True)
    return {
        "base_job_name": name,
        "source_dir": str(EXAMPLES / "word_lm"),
        "entry_point": "main.py",
        "hyperparameters": {"data": str(data), "epochs": 1, "save": str(tmp_path / "model.pt")}
        | flags,
        "hyperparameter_roles": {"learning_rate": "lr", "grad_clip_norm": "clip"},
    }


def test_a_classic_language_model_script_trains_cleanly(
    tmp_path: Path, prefect_api_url: str
) -> None:
    spec = word_lm_spec(tmp_path, "word-lm", lr=20, clip=0.25) | {
        # what the script prints: "... valid ppl 58.2", "End of training | ... | test ppl 56.1"
        "metric_definitions": [
            {"name": "valid:perplexity", "regex": r"valid ppl ([0-9.eE+-]+)"},
            {"name": "test:perplexity", "regex": r"test ppl ([0-9.eE+-]+)"},
        ],
        # a uniform guess over its 300 words is perplexity 300
        "success_criteria": [{"metric": "test:perplexity", "op": "<", "value": 100}],
    }
    code, output, run_dir = remedy_run(spec, tmp_path, prefect_api_url)
    assert code == 0, output
    state = load_state(run_dir / "state.json")
    assert state.end_reason.endswith("and it met test:perplexity < 100"), state.end_reason
    (attempt,) = state.history.attempts
    assert attempt.outcome is JobStatus.Completed and attempt.steps_run > 20
    assert attempt.final_loss < attempt.initial_loss - 1.0
    assert (tmp_path / "model.pt").stat().st_size > 0  # torch.save(model) still works
    perplexity = attempt.metrics["test:perplexity"]
    assert 1 < perplexity < 100 and attempt.metrics["valid:perplexity"] < 100
    shown = f"{perplexity:.4g}"

    # its own metrics in the attempt table, not the ResNet's accuracy or batch norm
    status = columns(remedy("status", "run", cwd=tmp_path).split("\n\n")[0])
    assert status["test:perplexity"] == [shown] and status["lr"] == ["20"]
    assert "valid:perplexity" in status and "train:loss" in status
    assert not {"acc", "test:accuracy", "bn", "warmup_lr"} & set(status)

    # the same run judged by a stricter criterion: it trained, and yet it is not clean
    spec["success_criteria"] = [{"metric": "test:perplexity", "op": "<", "value": 2}]
    code, output, strict_dir = remedy_run(spec, tmp_path / "strict", prefect_api_url)
    assert code != 0, output
    reason = load_state(strict_dir / "state.json").end_reason
    assert "success criterion test:perplexity < 2 not met (test:perplexity" in reason, reason

    # at --lr 1000 the loss stays finite far above its start (a uniform guess): the default
    # rules' DivergingLoss stops the job (it used to complete, "clean" to ExplodingTensor)
    del spec["success_criteria"]
    spec["hyperparameters"] |= {"lr": 1000, "clip": 1000}
    code, output, diverged_dir = remedy_run(spec, tmp_path / "diverged", prefect_api_url)
    state = load_state(diverged_dir / "state.json")
    first = state.history.attempts[0]
    assert first.outcome is JobStatus.Stopped, output
    assert [f.rule for f in first.findings][:1] == ["DivergingLoss"], output

    compared = remedy("compare", "run", "strict/run", cwd=tmp_path)
    rows = {line.split()[0]: line.split()[1:] for line in compared.splitlines()}
    assert rows["test:perplexity"][0] == shown and float(rows["test:perplexity"][1]) < 100
    assert "accuracy" not in compared
    remedy("report", "run", cwd=tmp_path)
    summary = (run_dir / "report" / "summary.md").read_text()
    assert "final metrics: valid:perplexity" in summary and f"test:perplexity {shown}" in summary
    assert "| loss | valid:perplexity | test:perplexity | train:loss | outcome |" in summary


def test_a_two_process_ddp_script_is_repaired_under_remedy_run(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """examples/ddp/train.py, PyTorch's DDP tutorial style (gloo on CPU), started by torchrun
    twice: its real divergence at --learning-rate 10 stops the whole job, and a lower rate
    through its own flag trains cleanly on both processes."""
    spec = {
        "base_job_name": "ddp",
        "source_dir": str(EXAMPLES / "ddp"),
        "entry_point": "train.py",
        "hyperparameters": {"learning-rate": 10, "epochs": 3},
        "hyperparameter_roles": {"learning_rate": "learning-rate"},
        "distribution": {"torch_distributed": {"enabled": True, "processes_per_host": 2}},
        # The seed's rule: this is about two processes. (The default rules also stop the
        # repair at 1.0: SGD + momentum 0.9 there drives the loss from 0 to a mean of 73 for
        # 10 steps, 40x the untrained model's, before it falls back on these easy blobs.)
        "rules": [exploding_tensor_rule().model_dump(mode="json")],
    }
    code, output, run_dir = remedy_run(
        spec, tmp_path, prefect_api_url, "--policy", "adaptive", "--probe-steps", "0"
    )  # no probes: this is about the script's own repair path
    assert code == 0, output
    state = load_state(run_dir / "state.json")
    first, *_, last = state.history.attempts
    assert first.outcome is JobStatus.Stopped and first.findings
    assert last.outcome is JobStatus.Completed and not last.findings
    assert last.spec.script_hyperparameters["learning-rate"] == 1.0  # search_lr_down: 10 -> 1
    assert last.final_loss < 0.5 * last.initial_loss
    job = run_dir / "jobs" / last.job_name
    assert sorted(p.name for p in (job / "tensors" / "workers").iterdir()) == [
        "worker_0",
        "worker_1",
    ]
    assert (job / "model" / "model.pt").is_file()  # rank 0 saved it to SM_MODEL_DIR


def test_a_language_model_far_too_hot_is_repaired_by_the_rate_search(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """The classic LM script at 100x its rate without clipping (its loss climbs from 5.7 to
    15-20, finite): the default rules and policy cut the rate inside a bracket until it
    trains, never back up to a rate that diverged (issue 21)."""
    spec = word_lm_spec(tmp_path, "word-lm-hot", lr=2000, clip=1e9) | {
        "metric_definitions": [{"name": "test:perplexity", "regex": r"test ppl ([0-9.eE+-]+)"}],
        "success_criteria": [{"metric": "test:perplexity", "op": "<", "value": 100}],
    }
    code, output, run_dir = remedy_run(spec, tmp_path, prefect_api_url)
    state = load_state(run_dir / "state.json")
    assert code == 0, output + (state.end_reason or "")
    runs, probes = state.history.runs, [a for a in state.history.attempts if a.kind == "probe"]
    # one round of probes (200, 20, 2 side by side) instead of a launch per rate
    assert sorted(p.spec.script_hyperparameters["lr"] for p in probes) == [2, 20, 200]
    hottest = max(probes, key=lambda p: p.spec.script_hyperparameters["lr"])
    # diverged: by a rule's finding, or at its rung, its loss climbing while lr 20's fell,
    # where the rung came before a rule's look (which comes first is the machine's pace)
    assert hottest.result.kind.value == "diverged"
    assert hottest.findings or "at its rung" in hottest.result.summary, hottest.result
    assert all(p.steps_run <= state.budgets.probe_steps + 2 for p in probes)
    first, last = runs
    assert first.result.kind.value == "diverged"
    best = min((p for p in probes if p.result.kind.value == "trained"), key=lambda p: p.result.loss)
    assert last.spec.script_hyperparameters["lr"] == best.spec.script_hyperparameters["lr"]
    assert "probed" in last.strategy_reason and "(best)" in last.strategy_reason
    assert last.outcome is JobStatus.Completed and last.metrics["test:perplexity"] < 100
    assert last.result is not None and last.result.kind.value == "trained"
    # the best probe held at its bound and went on as the run: its updates are the run's
    # first ones, counted once; the other that trained held too, and was stopped
    assert best.held and last.continues == best.job_name == last.job_name
    assert last.steps_run == 45 and best.steps_run == state.budgets.probe_steps  # its 45: all
    assert state.history.updates_spent == sum(a.steps_run for a in state.history.attempts) - (
        best.steps_run
    )
    (other,) = [p for p in probes if p.result.kind.value == "trained" and p is not best]
    assert other.held and other.outcome is JobStatus.Stopped
    # every probe is in the report's attempt table and in the total steps
    remedy("report", "run", cwd=tmp_path)
    summary = (run_dir / "report" / "summary.md").read_text()
    assert summary.count("| probe:search_lr_down |") == 3, summary
    status = remedy("status", "run", cwd=tmp_path)
    assert status.count("probe:search_lr_down") == 3, status


def test_a_language_model_at_a_thirtieth_of_its_rate_probes_the_decade_its_best_probe_left(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """The classic LM script (2 epochs of 45 updates it states) at 1/30 of its rate: held
    at half, learning too slowly. Probes at 10x, 100x and 1000x: 6.7 learns, 67 is outpaced
    at the rung (stable, far behind), 670 diverges. A decade is coarse there: one more probe
    at its middle (21, the intended rate is 20) learns faster than 6.7 and goes on as the
    run, which ends clean at about its intended run's perplexity (issue 21: without it, 6.7
    trained as the run, was found still descending at its end and relaunched at 21)."""
    spec = word_lm_spec(tmp_path, "word-lm-cold", lr=20 / 30, clip=0.25, epochs=2)
    spec["hyperparameter_roles"]["num_epochs"] = "epochs"  # its length: 2 x the 45 it states
    spec |= {
        "updates_per_epoch": 45,
        "metric_definitions": [{"name": "test:perplexity", "regex": r"test ppl ([0-9.eE+-]+)"}],
    }
    code, output, run_dir = remedy_run(spec, tmp_path, prefect_api_url)
    state = load_state(run_dir / "state.json")
    assert code == 0, output + (state.end_reason or "")
    first, last = state.history.runs
    assert first.findings[0].rule == "LearningTooSlowly" and first.steps_run == 45, first
    probes = [a for a in state.history.attempts if a.kind is AttemptKind.probe]
    rates = [p.spec.script_hyperparameters["lr"] for p in probes]
    assert rates[:3] == pytest.approx([20 / 3, 200 / 3, 2000 / 3]), rates
    assert probes[1].result is not None and probes[1].result.kind.value == "outpaced"
    middle = probes[3]
    assert middle.spec.script_hyperparameters["lr"] == pytest.approx(21.08, rel=1e-3)
    assert "between the best probe so far (6.66667) and 66.6667" in (middle.strategy_reason or "")
    assert last.continues == middle.job_name and last.outcome is JobStatus.Completed
    assert last.metrics["test:perplexity"] < 35, last.metrics  # intended (lr 20): 28.4


@pytest.mark.slow
def test_a_regression_at_a_rate_far_too_small_is_not_called_diverging_and_is_repaired(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """examples/sine_regression (Adam, MultiStepLR, MSE, no classes) at 1/1000 of its rate:
    its loss sits flat around 0.64, above its first batch's 0.51 by noise alone. That was
    once DivergingLoss at step 9, and the rate was cut further; the stall is found instead
    (TinyUpdates), the probes raise the rate, past the rates its measured updates say are
    still too small, and the relaunch trains."""
    spec = {
        "source_dir": str(REPO / "examples" / "sine_regression"),
        "entry_point": "fit.py",
        "hyperparameters": {"lr": 3e-6},
        "hyperparameter_roles": {"learning_rate": "lr"},
    }
    code, output, run_dir = remedy_run(spec, tmp_path, prefect_api_url)
    state = load_state(run_dir / "state.json")
    assert code == 0, output[-3000:] + (state.end_reason or "")
    runs = state.history.runs
    table = [(a.strategy, a.steps_run, [f.rule for f in a.findings], a.outcome) for a in runs]
    # A second relaunch may follow where a slow machine lets the first one's repair land
    # differently: the table says how, should this fail.
    first, last = runs[0], runs[-1]
    assert len(runs) in (2, 3), table
    assert [f.rule for f in first.findings] == ["TinyUpdates"], table
    # no full run is called diverging (a probe past the best rate may well diverge: that
    # closes the bracket from above)
    assert all(f.rule != "DivergingLoss" for a in state.history.runs for f in a.findings)
    assert last.spec.script_hyperparameters["lr"] > 3e-6
    assert last.outcome is JobStatus.Completed
    assert last.final_window_loss is not None and last.final_window_loss < 0.1
    # Its updates moved its weights about 1e-5 of themselves, 1e-4 at 3e-5, under a
    # healthy run's 1e-3: the probes pass over 3e-5 and say so.
    assert first.update_ratio is not None and first.update_ratio < 1e-4, first.update_ratio
    probes = [a for a in state.history.attempts if a.kind is AttemptKind.probe]
    assert probes and min(p.spec.script_hyperparameters["lr"] for p in probes) >= 3e-4
    assert "and below passed over" in (probes[0].strategy_reason or ""), probes[0]


@pytest.mark.slow
def test_a_full_batch_script_at_its_rate_is_not_asked_on_its_agreeing_gradients(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """examples/moons (full-batch gradient descent, no batch noise) at its own rate trains
    to 0.999 accuracy. Without noise consecutive gradients agree near a minimum too (0.44
    and 0.51 at lags 1 and 5 over its last third), so agreement tells nothing there: its
    loss never rises from one step to the next (a mini-batch's does about half the time),
    and the verdict does not ask. Clean at its first launch, nothing probed."""
    spec = {
        "source_dir": str(REPO / "examples" / "moons"),
        "entry_point": "train.py",
        "hyperparameters": {"lr": 0.5, "epochs": 800},
        "hyperparameter_roles": {"learning_rate": "lr"},
    }
    code, output, run_dir = remedy_run(spec, tmp_path, prefect_api_url)
    state = load_state(run_dir / "state.json")
    assert code == 0, output[-3000:] + (state.end_reason or "")
    (attempt,) = state.history.attempts  # nothing asked, nothing probed
    assert attempt.findings == [] and attempt.final_window_loss < 0.01
    assert min(attempt.gradient_agreement) >= 0.2, attempt.gradient_agreement
    assert attempt.loss_rises is not None and attempt.loss_rises < 0.2, attempt.loss_rises
    assert state.end_reason == "completed: the job finished and no rule found an issue"


def test_a_one_cycle_script_far_too_hot_is_repaired_and_its_anneal_is_no_finding(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """The tabular script typed --max_lr 50 (its own default 3e-3): its loss climbs to the
    thousands after its first updates, on OneCycle's ramp at about 2.4, and DivergingLoss
    stops it. The bracket closes at that rate, not at 50; the probes a STEP and more below
    it run on their own ramp: 0.0243 learned fastest, 0.243 far slower (past what the model
    takes), so the highest rate seen to hold goes on (0.00243 here; 0.0243 when 0.243's
    ramp counted as held), and trains to within 2 % of the intended run's accuracy (0.958
    at 3e-3). Its loss falls faster in its last third than in its middle one, as the
    schedule anneals the rate: the verdict once called that LearningTooSlowly, raised the
    rate on and on, and ended failed."""
    data = tmp_path / "data.csv"
    generate = [sys.executable, str(EXAMPLES / "tabular" / "generate_data.py"), "--out", str(data)]
    subprocess.run(generate, check=True)
    spec = {
        "base_job_name": "tabular",
        "source_dir": str(EXAMPLES / "tabular"),
        "entry_point": "train.py",
        "hyperparameters": {"csv": str(data), "max_lr": 50},
        "hyperparameter_roles": {"learning_rate": "max_lr", "output_dir": "out"},
        "metric_definitions": [{"name": "val:accuracy", "regex": r'"val_acc": ([0-9.eE+-]+)'}],
    }
    code, output, run_dir = remedy_run(spec, tmp_path, prefect_api_url)
    state = load_state(run_dir / "state.json")
    assert code == 0, output[-3000:] + (state.end_reason or "")
    first, *_, last = state.history.runs
    assert first.findings and first.findings[0].rule == "DivergingLoss"
    assert first.ramp_rate is not None and first.ramp_rate < 5  # on its ramp, far under 50
    assert last.outcome is JobStatus.Completed and not last.findings
    rate = last.spec.script_hyperparameters["max_lr"]
    assert rate < first.ramp_rate
    # no rate above the one kept went on: those were probed on their ramp only
    probes = [a for a in state.history.attempts if a.kind is AttemptKind.probe]
    assert any(p.spec.script_hyperparameters["max_lr"] > rate and p.ramp_rate for p in probes)
    assert last.metrics["val:accuracy"] >= 0.958 * 0.98  # within 2 % of the intended run
    # the anneal: the rate's last third under 3/4 of its middle one, the loss speeding up
    middle_rate, last_rate = last.rate_thirds
    assert last_rate <= 0.75 * middle_rate
    _, third, two_thirds, end = last.loss_thirds
    assert two_thirds - end >= 1.5 * (third - two_thirds)


def test_a_script_warming_up_over_a_third_of_its_steps_is_repaired_in_one_relaunch(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """examples/warmup_finetune (SGD with momentum, a linear warmup over its first 120 of
    400 steps) typed 1000x too hot: its loss blows up on its ramp, at about 2.3. Probes of
    25 updates a STEP and more below that all run on their own ramp: the highest led but
    had held only a fraction of its rate, and once went on as the run and diverged at its
    peak (update 129). Now the highest rate seen to hold goes on, and the one relaunch
    trains to the intended run's accuracy (0.771 at 0.02)."""
    spec = {
        "base_job_name": "warmup",
        "source_dir": str(EXAMPLES / "warmup_finetune"),
        "entry_point": "train.py",
        "hyperparameters": {"learning-rate": 20, "num-train-steps": 400},
        "hyperparameter_roles": {"learning_rate": "learning-rate", "max_steps": "num-train-steps"},
        "metric_definitions": [{"name": "test:accuracy", "regex": r"eval_accuracy = ([0-9.]+)"}],
        "num_classes": 10,
    }
    code, output, run_dir = remedy_run(spec, tmp_path, prefect_api_url)
    state = load_state(run_dir / "state.json")
    assert code == 0, output[-3000:] + (state.end_reason or "")
    table = [(a.strategy, a.steps_run, a.ramp_rate, a.result) for a in state.history.attempts]
    first, last = state.history.runs  # one relaunch: none diverged at its peak
    assert first.findings and first.result and first.result.kind is ResultKind.diverged, table
    # caught on its ramp, far under the 20 typed: by DivergingLoss near update 15 (2.48), or
    # on a loaded machine, the rules behind, by the NaN guard at update 31 (4.96)
    assert first.ramp_rate is not None and first.ramp_rate < 20 / 2, table
    rate = last.spec.script_hyperparameters["learning-rate"]
    assert rate < first.ramp_rate / 5, table
    assert last.outcome is JobStatus.Completed and not last.findings
    assert last.metrics["test:accuracy"] >= 0.771 * 0.98, table
    probes = [a for a in state.history.attempts if a.kind is AttemptKind.probe]
    assert any(
        p.spec.script_hyperparameters["learning-rate"] > rate and p.ramp_rate for p in probes
    )


def test_a_script_whose_settings_live_in_a_yaml_file_is_repaired_through_its_key(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """examples/yaml_config reads everything from the YAML file its command line names:
    typed lr 10 there (its own 0.01), its loss climbs into the hundreds. Mapped as
    configs/spirals.yaml:optimizer.lr, the rate search lowers it in each attempt's copy of
    the file, and the repaired run classifies its three spirals as the intended run does
    (test accuracy 1.0 at 0.01); the user's file is never written."""
    config = EXAMPLES / "yaml_config" / "configs" / "spirals.yaml"
    before = config.read_text()
    lr, epochs = "configs/spirals.yaml:optimizer.lr", "configs/spirals.yaml:train.epochs"
    spec = {
        "base_job_name": "spirals",
        "source_dir": str(EXAMPLES / "yaml_config"),
        "entry_point": "train.py",
        "arguments": ["--config", "configs/spirals.yaml"],
        "hyperparameters": {lr: 10, epochs: 12},
        "hyperparameter_roles": {"learning_rate": lr, "num_epochs": epochs},
        "metric_definitions": [{"name": "test:accuracy", "regex": r"test accuracy ([0-9.]+)"}],
        "num_classes": 3,
    }
    code, output, run_dir = remedy_run(spec, tmp_path, prefect_api_url)
    state = load_state(run_dir / "state.json")
    assert code == 0, output[-3000:] + (state.end_reason or "")
    first, *_, last = state.history.runs
    assert first.findings and first.findings[0].rule == "DivergingLoss"
    assert last.outcome is JobStatus.Completed and not last.findings
    rate = last.spec.script_hyperparameters[lr]
    assert isinstance(rate, float) and rate < 10
    changed = [a.changes[f"hyperparameters.{lr}"] for a in state.history.attempts
               if f"hyperparameters.{lr}" in a.changes]  # fmt: skip
    assert changed and changed[0][0] == 10  # the search began from the value typed
    assert last.metrics["test:accuracy"] >= 0.98  # within 2 % of the intended run's 1.0
    copy = run_dir / "jobs" / last.job_name / "config" / "spirals.yaml"
    assert f"lr: {rate}" in copy.read_text() and "points_per_arm: 400" in copy.read_text()
    assert config.read_text() == before


def test_an_accelerate_script_whose_units_a_rate_too_high_killed_is_repaired_by_the_rate(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """examples/accelerate_text (Accelerate's prepare, accumulate and backward; AdamW under
    a warmup) typed at 1.0, 1000x its rate: its ReLUs die as it trains (DyingRelu at
    update 100), and it maps no flag of its architecture. It once ended "no strategy
    left"; the dead units' order ends in the rate's search down, whose probes pick 0.1
    (accuracy 0.93; 0.715 at its own 1e-3)."""
    spec = {
        "source_dir": str(EXAMPLES / "accelerate_text"),
        "entry_point": "train.py",
        "hyperparameters": {"learning_rate": 1.0, "num_epochs": 4},
        "hyperparameter_roles": {"learning_rate": "learning_rate", "num_epochs": "num_epochs"},
        "num_classes": 4,
        "metric_definitions": [{"name": "test:accuracy", "regex": "'accuracy': ([0-9.]+)"}],
    }
    code, output, run_dir = remedy_run(spec, tmp_path, prefect_api_url)
    state = load_state(run_dir / "state.json")
    assert code == 0, output[-3000:] + (state.end_reason or "")
    first, *_, last = state.history.runs
    assert [f.rule for f in first.findings] == ["DyingRelu"], first.findings
    assert last.strategy == "search_lr_down" and last.outcome is JobStatus.Completed
    assert last.spec.script_hyperparameters["learning_rate"] <= 0.1
    assert last.steps_run == 500  # 4 epochs of 250 batches, two batches an update
    assert last.metrics["test:accuracy"] >= 0.9, last.metrics


def test_an_epoch_counting_script_at_a_rate_far_too_small_is_stopped_before_half_its_epochs(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """The VAE script (a config dataclass, logging, tqdm bars, SGD under ReduceLROnPlateau)
    counts epochs, not updates: its length is its `--epochs` times the updates of one pass
    over its DataLoader, which the launcher measures in the first epoch (43 here). With the
    flag mapped to num_epochs, a run at 1/10,000 of its rate, which learns nothing while its
    gradients still agree, is asked at an eighth of its 2,064 updates (or a quarter, where
    the first look past the eighth came past it), not run to its end.
    The job makes up to 800 updates a second: the monitor looks every 0.5 s until a look
    sees its progress, 0.1 s later for its pace, then when it reaches an eighth; 48 epochs,
    so that the first look to see its progress comes before half (at 24, a third of a
    second from a quarter to half, it once came after). One launch allowed: the run ends
    there, not clean, naming no model (none trained)."""
    data = tmp_path / "digits.npz"
    make = [sys.executable, str(EXAMPLES / "vae" / "make_digits.py"), "--out", str(data)]
    subprocess.run(make, check=True)
    spec = {
        "run_spec": {
            "base_job_name": "vae",
            "source_dir": str(EXAMPLES / "vae"),
            "entry_point": "train.py",
            "hyperparameters": {"data": str(data), "lr": 1e-6, "epochs": 48},
            "hyperparameter_roles": {
                "learning_rate": "lr", "output_dir": "out_dir", "num_epochs": "epochs"
            },
            "rules": [],  # the verdict's own question, not TinyUpdates (at update 200)
        },
        "budgets": {"max_num_retraining": 1},
    }  # fmt: skip
    code, output, run_dir = remedy_run(spec, tmp_path, prefect_api_url, "--poll-interval", "0.5")
    assert code != 0, output[-3000:]
    state = load_state(run_dir / "state.json")
    (attempt,) = state.history.attempts
    (finding,) = attempt.findings
    assert finding.rule == "LearningTooSlowly", finding
    asked = re.match(r"the model has not begun to learn by update (\d+), (?:past )?"
                     r"(?:an eighth|a quarter) of the job's 2064: ", finding.message)  # fmt: skip
    assert asked is not None, finding.message
    assert "its gradients still agreed" in finding.message
    assert 258 <= int(asked[1]) < 1032 and int(asked[1]) <= attempt.steps_run < 2064  # stopped
    log = (run_dir / "jobs" / attempt.job_name / "logs" / "training.log").read_text()
    assert "43 updates an epoch" in log
    assert state.end_reason is not None and state.end_reason.startswith(
        "max_num_retraining (1) reached; the last attempt: the model has not begun to learn"
    )
    assert "best model trained" not in output


# examples/digits prints `Accuracy: 598/600 (100%)`: a percentage
DIGITS_ACCURACY = {"name": "test:accuracy", "regex": r"Accuracy: \d+/\d+ \(([0-9.]+)%\)"}


def digits_spec(tmp_path: Path, name: str, lr: float, epochs: int) -> dict:
    """examples/digits on generated digits, its 10 classes stated, its accuracy read as
    the fraction its percentage is."""
    data = tmp_path / "digits.npz"
    make = [sys.executable, str(EXAMPLES / "vae" / "make_digits.py"), "--out", str(data)]
    subprocess.run(make, check=True)
    return {
        "base_job_name": name,
        "source_dir": str(EXAMPLES / "digits"),
        "entry_point": "main.py",
        "hyperparameters": {"data": str(data), "lr": lr, "epochs": epochs},
        "hyperparameter_roles": {"learning_rate": "lr"},
        "num_classes": 10,
        "metric_definitions": [DIGITS_ACCURACY | {"percent": True}],
    }


def test_a_script_printing_its_accuracy_as_a_percentage_is_judged_as_a_fraction(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """examples/digits (PyTorch's MNIST example style: Adadelta under StepLR, F.nll_loss,
    `Accuracy: 598/600 (100%)` after each epoch) at its own rate, its 10 classes stated.
    With "percent": true on its definition its accuracy is read as a fraction, judged
    against chance, and the run is clean. Read as printed, 100 (or 10 at chance) would pass
    for far above chance 0.1: it is not judged, and the run is not clean, saying what to
    add."""
    spec = digits_spec(tmp_path, "digits", lr=1.0, epochs=3)
    code, output, run_dir = remedy_run(spec, tmp_path / "percent", prefect_api_url)
    assert code == 0, output[-3000:]
    state = load_state(run_dir / "state.json")
    (attempt,) = state.history.attempts
    assert 0.9 <= attempt.metrics["test:accuracy"] <= 1.0  # 598/600 printed as (100%)
    assert state.end_reason is not None and state.end_reason.startswith("completed: the job")

    spec["metric_definitions"] = [DIGITS_ACCURACY]
    code, output, run_dir = remedy_run(spec, tmp_path / "printed", prefect_api_url)
    assert code != 0, output[-3000:]
    state = load_state(run_dir / "state.json")
    (attempt,) = state.history.attempts
    assert attempt.metrics["test:accuracy"] > 1
    assert state.end_reason is not None and "is not a fraction between 0 and 1" in state.end_reason
    assert '"percent": true' in state.end_reason


def test_a_script_whose_gradients_disagree_at_a_rate_far_too_small_is_searched_up_only(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """examples/digits at 1/1000 of its rate (Adadelta at 0.001, dropout): by a quarter of
    its 6 epochs it has learned nothing, and under dropout its gradients disagree as a
    noise floor's do, which alone would leave the rate's direction unknown (probes both
    ways: 7). Its updates moved the weights under a tenth of a healthy run's 1e-3 of
    themselves: LearningTooSlowly, probed upwards only, and repaired."""
    spec = digits_spec(tmp_path, "digits-cold", lr=0.001, epochs=6)
    spec["hyperparameter_roles"] |= {"num_epochs": "epochs"}  # held by its measured epochs
    code, output, run_dir = remedy_run(spec, tmp_path / "job", prefect_api_url)
    state = load_state(run_dir / "state.json")
    assert code == 0, (state.end_reason, output[-3000:])
    first, last = state.history.runs
    (found,) = first.findings
    assert found.rule == "LearningTooSlowly", found.message
    assert "its updates moved the weights" in found.message, found.message
    assert min(first.gradient_agreement) < 0.2  # disagreeing: the agreement could not tell
    assert first.update_ratio is not None and first.update_ratio <= 1e-4
    probes = [a for a in state.history.attempts if a.kind is AttemptKind.probe]
    assert probes and all(p.spec.role("learning_rate") > 0.001 for p in probes)  # up only
    assert last.metrics["test:accuracy"] >= 0.9


def test_a_run_still_descending_fast_at_half_is_asked_there_and_the_probes_answer(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """examples/signals (a Trainer class, RMSprop, a 1-D CNN; 4 epochs of 50 updates over a
    DataLoader) at its default rate ends at about 99 % accuracy, its loss still falling
    fast. Held at half its length (once its job measured an epoch), its loss well below its
    start, its gradients still agree at both lags (about 0.37/0.45): it is asked there,
    while it waits, whether its rate holds it back, and the probes at higher rates answer.
    10x learned faster here: the held job is stopped at half and the probe goes on as the
    run (a probe that learned no faster would have let it go on)."""
    spec = {
        "run_spec": {
            "base_job_name": "signals",
            "source_dir": str(EXAMPLES / "signals"),
            "entry_point": "run_training.py",
            "hyperparameters": {"learning-rate": 1e-3, "n-epochs": 4},
            "hyperparameter_roles": {"learning_rate": "learning-rate", "num_epochs": "n-epochs"},
            "metric_definitions": [
                {"name": "test:accuracy", "regex": "final val_acc ([0-9.]+)"}
            ],
            "num_classes": 3,
        },
        "budgets": {"max_num_retraining": 2},  # the question needs a launch to repair with
    }  # fmt: skip
    code, output, run_dir = remedy_run(spec, tmp_path, prefect_api_url)
    state = load_state(run_dir / "state.json")
    first, second = state.history.runs[:2]
    assert first.epoch_updates == 50, first
    (finding,) = first.findings
    assert finding.rule == "StillDescending" and finding.step == 99, finding
    assert finding.message.startswith("the model learned in the first 100 of the job's 200")
    assert first.steps_run == 100 and first.outcome is JobStatus.Stopped, output[-3000:]
    probes = [a for a in state.history.attempts if a.kind is AttemptKind.probe]
    assert probes and all(p.spec.script_hyperparameters["learning-rate"] > 1e-3 for p in probes)
    assert second.spec.script_hyperparameters["learning-rate"] > 1e-3, second


# examples/gan at its usual rate: healthy (ring error about 0.1 at its end)
GAN = {
    "base_job_name": "gan",
    "source_dir": str(EXAMPLES / "gan"),
    "entry_point": "train.py",
    "hyperparameters": {"lr": 1e-3, "iters": 1500},
    "hyperparameter_roles": {"learning_rate": "lr"},
}


def test_a_gan_is_not_judged_by_its_losses_and_says_what_to_state(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """A healthy toy GAN (examples/gan: a discriminator and a generator, an Adam each) once
    had DivergingLoss at update 119 and 16 "repairs" after it: its losses are the two
    networks', each rising as the other improves. The launcher counts the optimizers that
    step parameters of their own, and a run with 2 and no success_criteria ends at the
    monitor's first look that sees them, its job stopped, saying what to state."""
    code, output, run_dir = remedy_run(GAN, tmp_path, prefect_api_url)
    assert code != 0, output[-3000:]
    state = load_state(run_dir / "state.json")
    (attempt,) = state.history.attempts  # nothing relaunched
    assert state.end_reason is not None and state.end_reason.startswith(
        f"not judged: job {attempt.job_name} steps 2 optimizers over parameters of their own"
    ), state.end_reason
    assert "success_criteria" in state.end_reason
    assert attempt.outcome is JobStatus.Stopped and attempt.steps_run < 3000  # 2 a iteration
    log = (run_dir / "jobs" / attempt.job_name / "logs" / "training.log").read_text()
    assert "2 optimizers step parameters of their own" in log


def test_a_gan_with_a_criterion_is_judged_by_it_and_by_gradient_rules_only(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """The same GAN with a success criterion on its own metric: with the default rules it
    ends at once naming the rules that read the loss (had one fired, it is not acted on);
    with the gradient rule alone, as the message says, it runs to its end, clean by its
    metric."""
    spec = GAN | {
        "metric_definitions": [{"name": "test:ring_error", "regex": '"ring_error": ([0-9.eE+-]+)'}],
        "success_criteria": [{"metric": "test:ring_error", "op": "<", "value": 0.3}],
    }
    code, output, run_dir = remedy_run(spec, tmp_path / "default", prefect_api_url)
    assert code != 0, output[-3000:]
    state = load_state(run_dir / "state.json")
    (attempt,) = state.history.attempts  # nothing "repaired"
    assert state.end_reason is not None and "the rules that read the loss cannot judge it: " in (
        state.end_reason
    ), state.end_reason
    named = state.end_reason.split("cannot judge it: ")[1].split(". State")[0].split(", ")
    assert {"DivergingLoss", "LossPlateau", "TinyUpdates"} <= set(named), named
    assert "ExplodingTensor" not in named and "success_criteria" in state.end_reason
    gradients_only = spec | {"rules": [{"name": "ExplodingTensor", "rule": "ExplodingTensor"}]}
    code, output, run_dir = remedy_run(gradients_only, tmp_path / "gradients", prefect_api_url)
    assert code == 0, output[-3000:]
    state = load_state(run_dir / "state.json")
    (attempt,) = state.history.attempts
    assert attempt.outcome is JobStatus.Completed and attempt.steps_run == 3000
    assert attempt.metrics["test:ring_error"] < 0.3
    assert state.end_reason is not None and "it met test:ring_error < 0.3" in state.end_reason


def hf_trainer_spec(learning_rate: float) -> dict:
    """examples/hf_trainer as a user maps it: HfArgumentParser's own flags, `--use_cpu` a
    switch, the Trainer's `--output_dir` each attempt's own, its evaluation the test
    accuracy of a 2-class model."""
    flags = {"max_steps": 300, "learning_rate": learning_rate, "max_grad_norm": 1.0,
             "per_device_train_batch_size": 32, "report_to": "none", "save_strategy": "no",
             "logging_steps": 50, "use_cpu": True}  # fmt: skip
    roles = {"learning_rate": "learning_rate", "max_steps": "max_steps",
             "output_dir": "output_dir", "grad_clip_norm": "max_grad_norm"}  # fmt: skip
    return {
        "source_dir": str(EXAMPLES / "hf_trainer"),
        "entry_point": "run_classifier.py",
        "hyperparameters": flags,
        "bare_flags": ["use_cpu"],
        "hyperparameter_roles": roles,
        "metric_definitions": [{"name": "test:accuracy", "regex": '"eval_accuracy": ([0-9.]+)'}],
        "num_classes": 2,
    }


def test_a_hugging_face_trainer_script_that_fit_its_data_is_not_asked_about_its_rate(
    tmp_path: Path, prefect_api_url: str
) -> None:
    """examples/hf_trainer (the Hugging Face Trainer, HfArgumentParser's flags, its linear
    decay) at its own rate: held at an eighth, a quarter and half of its 300 updates and let
    go on, one launch, accuracy 1.0. At half its training loss is 2 % of the untrained
    model's and its gradients agree (0.99: every sample fit, each batch growing the same
    margins); it was asked there whether its rate held it back (1.67x the updates, for the
    same accuracy). A classifier that fit its data is not asked."""
    code, output, run_dir = remedy_run(hf_trainer_spec(5e-4), tmp_path, prefect_api_url)
    state = load_state(run_dir / "state.json")
    assert code == 0, output[-3000:] + (state.end_reason or "")
    (only,) = state.history.attempts
    assert only.outcome is JobStatus.Completed and only.steps_run == 300 and not only.findings
    assert only.metrics["test:accuracy"] == 1.0, only.metrics
    assert only.final_window_loss is not None and only.initial_window_loss is not None
    assert only.final_window_loss < 0.05 * only.initial_window_loss  # fit: not asked
    assert "held after 150 updates and asked there, trains on to its end" in output
