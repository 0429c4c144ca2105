"""Scripts of each command-line style, unmodified under `remedy run` (tests/examples/scripts):
a configurator that takes a config file then --key=value overrides (it asserts that form and
each value's type), a Hydra-style entry point of name=value overrides with dotted names, and
an argparse one with explicit booleans and a store_true switch. Each gets its attempt's own
output folder through the output_dir role; the argparse one resumes through its own flag.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from remedy.state_schema import JobStatus, load_state
from tests.helpers.user_scripts import remedy_run

pytestmark = pytest.mark.slow
SCRIPTS = Path(__file__).parent / "scripts"


def job_folder(run_dir: Path, job_name: str) -> Path:
    return run_dir / "jobs" / job_name


def test_a_configurator_script_gets_a_config_file_then_key_value_overrides(
    tmp_path: Path, prefect_api_url: str
) -> None:
    spec = {
        "base_job_name": "configurator",
        "source_dir": str(SCRIPTS / "configurator"),
        "entry_point": "train.py",
        "hyperparameter_style": "--name=value",
        "arguments": ["config/tiny.py"],
        # at 2.0 the linear model's weights grow without bound for real
        "hyperparameters": {"learning_rate": 2.0, "min_lr": 0.2, "compile": False},
        "hyperparameter_roles": {"learning_rate": "learning_rate", "output_dir": "out_dir"},
        "coupled_flags": {"min_lr": {"follows": "learning_rate", "relation": "ratio"}},
    }
    code, output, run_dir = remedy_run(spec, tmp_path, prefect_api_url, "--policy", "adaptive")
    assert code == 0, output
    state = load_state(run_dir / "state.json")
    first, *_, last = state.history.attempts
    assert first.outcome is JobStatus.Stopped and first.findings, output
    assert last.outcome is JobStatus.Completed and last.final_loss < 0.1 * last.initial_loss
    flags = last.spec.script_hyperparameters
    assert flags["learning_rate"] < 2.0
    # the schedule's floor moved with the learning rate: the same ratio, not a stale 0.2
    assert flags["min_lr"] == pytest.approx(0.1 * flags["learning_rate"])
    assert last.changes["hyperparameters.min_lr"][0] == 0.2 or len(state.history.attempts) > 2
    # each attempt wrote into its own folder, with the values it was given
    seen = []
    for attempt in (first, last):
        out = job_folder(run_dir, attempt.job_name) / "model"
        config = json.loads((out / "config.json").read_text())
        assert config["learning_rate"] == attempt.spec.script_hyperparameters["learning_rate"]
        assert config["min_lr"] == attempt.spec.script_hyperparameters["min_lr"]
        assert config["compile"] is False and config["max_iters"] == 120  # file, then flags
        seen.append(config["learning_rate"])
    assert seen[0] == 2.0 and seen[1] < 2.0
    saved = torch.load(job_folder(run_dir, last.job_name) / "model" / "ckpt.pt")
    assert saved["config"]["learning_rate"] == flags["learning_rate"]
    # the payload shows the script's flags, not the built-in job's fields it never got
    payload = json.loads((run_dir / "state.json").read_text())["state"]
    for shown in (payload["run_spec"], payload["history"]["attempts"][-1]["spec"]):
        assert "depth" not in shown and "learning_rate" not in shown and "momentum" not in shown
        assert shown["hyperparameters"]["min_lr"] == flags["min_lr"]


def test_a_hydra_style_entry_point_gets_dotted_overrides(
    tmp_path: Path, prefect_api_url: str
) -> None:
    spec = {
        "base_job_name": "hydra-style",
        "source_dir": str(SCRIPTS / "hydra_style"),
        "entry_point": "train.py",
        "hyperparameter_style": "name=value",
        "hyperparameters": {
            "trainer.max_epochs": 2,
            "optim.lr": 0.05,
            "model.compile": False,
            "+trainer.note": "two words, one 'quote'",
        },
        "hyperparameter_roles": {"learning_rate": "optim.lr", "output_dir": "hydra.run.dir"},
    }
    code, output, run_dir = remedy_run(spec, tmp_path, prefect_api_url)
    assert code == 0, output
    (attempt,) = load_state(run_dir / "state.json").history.attempts
    assert attempt.outcome is JobStatus.Completed
    out = job_folder(run_dir, attempt.job_name) / "model"
    config = json.loads((out / ".hydra" / "config.json").read_text())
    assert config["trainer"] == {
        "max_epochs": 2, "batch_size": 32, "seed": 0, "note": "two words, one 'quote'"
    }  # fmt: skip
    assert config["optim"]["lr"] == 0.05 and config["model"]["compile"] is False
    assert config["hydra"]["run"]["dir"] == str(out) and (out / "model.pt").is_file()


def test_an_argparse_script_gets_explicit_booleans_a_switch_and_its_resume_flag(
    tmp_path: Path, prefect_api_url: str
) -> None:
    spec = {
        "base_job_name": "argparse-style",
        "source_dir": str(SCRIPTS / "argparse_style"),
        "entry_point": "train.py",
        "hyperparameters": {"lr": 0.1, "steps": 15, "shuffle": False, "verbose": True},
        "bare_flags": ["verbose"],
        "hyperparameter_roles": {
            "learning_rate": "lr", "output_dir": "work-dir", "resume": "resume"
        },
    }  # fmt: skip
    code, output, run_dir = remedy_run(spec, tmp_path / "first", prefect_api_url)
    assert code == 0, output
    (first,) = load_state(run_dir / "state.json").history.attempts
    model_dir = job_folder(run_dir, first.job_name) / "model"
    args = json.loads((model_dir / "args.json").read_text())
    assert (args["shuffle"], args["verbose"], args["resume"]) == (False, True, None)
    assert args["work_dir"] == str(model_dir) and (model_dir / "model.pt").is_file()

    # a warm start from that folder (marked a checkpoint, as the contract asks): the resume
    # flag gets the job's copy of it
    (model_dir / "checkpoint.json").write_text(json.dumps({"epoch": 0, "step": 15}))
    spec["init_checkpoint"] = str(model_dir)
    spec["hyperparameters"]["steps"] = 60  # type: ignore[index]
    code, output, warm_dir = remedy_run(spec, tmp_path / "warm", prefect_api_url)
    assert code == 0, output
    (warm,) = load_state(warm_dir / "state.json").history.attempts
    job = job_folder(warm_dir, warm.job_name)
    args = json.loads((job / "model" / "args.json").read_text())
    assert args["resume"] == str(job / "checkpoints" / "model")
    assert warm.initial_loss < 0.5 * first.initial_loss  # it did start from the trained model
