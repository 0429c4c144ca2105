"""The entry point as the backend runs it: a real `python -m remedy.training.train` process."""

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from remedy.models import ResNetConfig, build_model
from remedy.state_schema import Hyperparameters, RunSpec
from remedy.training.checkpoint import load_checkpoint
from tests.helpers.builtin_job import (
    REPO,
    TINY,
    command,
    job_env,
    read_metrics,
    run_job,
    strict_json,
)
from tests.helpers.cifar import write_tiny_cifar10

STEP_KEYS = {"type", "step", "epoch", "loss", "accuracy", "grad_norm", "learning_rate", "wall_time"}
EPOCH_KEYS = {"type", "epoch", "step", "test_loss", "test_accuracy", "wall_time"}


def test_a_tiny_job_writes_progress_metrics_checkpoints_and_result(tmp_path: Path) -> None:
    done = run_job(tmp_path, TINY)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"

    progress = strict_json((out / "progress.json").read_text())
    assert progress["step"] == progress["total_steps"] == 6  # ceil(48 / 16) x 2 epochs
    assert progress["steps_per_epoch"] == 3 and progress["epoch"] == 1
    assert progress["learning_rate"] == 0.05  # epoch 1: after the warmup epoch

    lines = read_metrics(out)
    steps = [line for line in lines if line["type"] == "step"]
    epochs = [line for line in lines if line["type"] == "epoch"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4, 5, 6]
    assert [s["learning_rate"] for s in steps] == [0.01] * 3 + [0.05] * 3
    assert all(set(s) == STEP_KEYS for s in steps[:5]) and all(set(e) == EPOCH_KEYS for e in epochs)
    # the gradients of update 5 kept, compared with update 6's (training/gradient_agreement.py)
    assert set(steps[5]) == STEP_KEYS | {"grad_agreement_1"}
    assert -1 <= steps[5]["grad_agreement_1"] <= 1
    assert [(e["epoch"], e["step"]) for e in epochs] == [(0, 3), (1, 6)]
    assert all(0 <= s["accuracy"] <= 1 and s["loss"] > 0 and s["grad_norm"] > 0 for s in steps)
    assert progress["first_loss"] == steps[0]["loss"]  # what "the model trained" is judged by

    result = strict_json((out / "result.json").read_text())
    assert result["status"] == "Completed" and result["steps"] == 6
    assert result["epochs_completed"] == 2
    assert result["final_accuracy"] == epochs[-1]["test_accuracy"]
    assert result["final_loss"] == epochs[-1]["test_loss"]
    assert result["final_train_loss"] == steps[-1]["loss"]

    checkpoints = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert checkpoints == ["epoch-0001", "epoch-0002"]
    model = build_model(ResNetConfig(depth=8, width=2, batch_norm=True))
    assert load_checkpoint(out / "checkpoints" / "epoch-0002", model).step == 6

    assert "epoch 1 done" in done.stdout and "Completed" in done.stdout
    assert not list(out.glob(".*tmp*"))  # atomic writes leave no temporary files


def test_cifar10_folder_is_read(tmp_path: Path) -> None:
    data = write_tiny_cifar10(tmp_path / "cifar", samples_per_batch=8, test_samples=10)
    config = TINY | {
        "dataset": "cifar10",
        "data_path": str(data),
        "train_samples": None,
        "test_samples": None,
        "num_epochs": 1,
        "checkpoint_every_epochs": 0,
    }
    done = run_job(tmp_path, config)
    assert done.returncode == 0, done.stderr
    progress = strict_json((tmp_path / "out" / "progress.json").read_text())
    assert progress["steps_per_epoch"] == 3  # 40 images in batches of 16
    assert not (tmp_path / "out" / "checkpoints").exists()


def test_a_diverging_job_keeps_training_and_writes_valid_json(tmp_path: Path) -> None:
    # A learning rate this absurd overflows the weights within a few steps. With the NaN
    # guard off the job must not notice on its own: spotting it is the debugger's job.
    config = TINY | {"add_batch_norm": 0, "warmup_learning_rate": 1e12, "learning_rate": 1e12}
    config["nan_guard"] = "off"
    done = run_job(tmp_path, config)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "out"
    steps = [line for line in read_metrics(out) if line["type"] == "step"]
    assert len(steps) == 6 and steps[-1]["loss"] is None  # NaN written as null
    result = strict_json((out / "result.json").read_text())
    assert result["status"] == "Completed" and result["final_train_loss"] is None
    assert result["final_loss"] is None


def test_a_stop_file_stops_after_the_current_step(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "stop").touch()  # present from the start: the first step is the last
    done = run_job(tmp_path, TINY)
    assert done.returncode == 0, done.stderr
    result = strict_json((tmp_path / "out" / "result.json").read_text())
    assert result == {
        "status": "Stopped", "steps": 1, "epochs_completed": 0, "final_loss": None,
        "final_accuracy": None, "final_train_loss": result["final_train_loss"],
        "skipped_steps": 0,
    }  # fmt: skip
    assert result["final_train_loss"] > 0
    assert "stop requested" in done.stdout
    assert not (tmp_path / "out" / "checkpoints").exists()


def test_a_bound_on_updates_stops_the_job_itself(tmp_path: Path) -> None:
    """REMEDY_MAX_UPDATES (a probe's bound): Stopped after that many updates of the launch."""
    done = run_job(tmp_path, TINY, REMEDY_MAX_UPDATES="3")
    assert done.returncode == 0, done.stderr
    result = strict_json((tmp_path / "out" / "result.json").read_text())
    assert (result["status"], result["steps"]) == ("Stopped", 3)


def test_a_held_bound_writes_its_progress_and_goes_on_when_continued(tmp_path: Path) -> None:
    """With REMEDY_CONTINUE_FILE the bound holds the job: progress.json shows the bound
    reached (the flow waits for it), and the continue file lets it train to its end."""
    go_on = tmp_path / "continue_request"
    env = job_env(tmp_path / "out", REMEDY_MAX_UPDATES="3", REMEDY_CONTINUE_FILE=str(go_on))
    process = subprocess.Popen(
        command(tmp_path, TINY), cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 120
        while read_progress(tmp_path / "out").get("step") != 3:
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.1)
        time.sleep(1.0)
        assert process.poll() is None and read_progress(tmp_path / "out")["step"] == 3
        go_on.touch()
        stdout, _ = process.communicate(timeout=120)
    finally:
        process.kill()
    assert "held at its bound (3 updates)" in stdout
    result = strict_json((tmp_path / "out" / "result.json").read_text())
    assert (result["status"], result["steps"]) == ("Completed", 6)


def read_progress(out: Path) -> dict[str, Any]:
    try:
        return strict_json((out / "progress.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def test_a_bad_job_variable_fails_naming_it_before_anything_is_written(tmp_path: Path) -> None:
    """The backend's variables are read as the launcher reads them (JobEnvironment): a bad
    one ends the job with status 2 and its name, as a bad hyperparameter does."""
    done = run_job(tmp_path, TINY, REMEDY_MAX_UPDATES="many")
    assert done.returncode == 2, done.stderr
    assert "REMEDY_MAX_UPDATES='many': expected a positive integer" in done.stderr
    assert not (tmp_path / "out").exists()


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"{path.name} never appeared: {process.communicate()}")
        time.sleep(0.05)


@pytest.mark.parametrize("how", ["sigterm", "stop_file"])
def test_a_running_job_stops_cleanly(tmp_path: Path, how: str) -> None:
    config = TINY | {"num_epochs": 1000, "checkpoint_every_epochs": 0}
    out = tmp_path / "out"
    process = subprocess.Popen(
        command(tmp_path, config), cwd=REPO, env=job_env(out),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    wait_for(out / "progress.json", process)
    if how == "sigterm":
        process.send_signal(signal.SIGTERM)
    else:
        (out / "stop").touch()
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr

    result = strict_json((out / "result.json").read_text())
    assert result["status"] == "Stopped"
    assert 1 <= result["steps"] < 3000
    lines = read_metrics(out)  # every line whole
    assert [line["step"] for line in lines if line["type"] == "step"][-1] == result["steps"]
    assert "stop requested" in stdout


# The job as `python -m remedy.training.train` runs it, with a setup slower than the stop
# request's grace (data loading on a busy machine): SIGTERM arrives while it sets up.
SLOW_SETUP = """
import os, signal, sys, time
from remedy.training import train

def slow_setup(config, device):
    os.kill(os.getpid(), signal.SIGTERM)  # as the backend's stop escalation sends it
    time.sleep(30)  # the grace (2 s) ends here: the stop is honoured where the job is
    raise AssertionError("the stop never came")

train.setup = slow_setup
sys.exit(train.main(sys.argv[1:]))
"""


def test_a_sigterm_during_the_setup_is_a_clean_stop(tmp_path: Path) -> None:
    """Not an uncaught exception (a failed job): Stopped after 0 steps, exit status 0."""
    cli = command(tmp_path, TINY)[3:]  # --hyperparameters FILE --output-dir DIR
    done = subprocess.run(
        [sys.executable, "-c", SLOW_SETUP, *cli], cwd=REPO, env=job_env(tmp_path / "out"),
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = strict_json((tmp_path / "out" / "result.json").read_text())
    assert (result["status"], result["steps"]) == ("Stopped", 0)
    assert "stop requested (SIGTERM)" in done.stdout


@pytest.mark.parametrize(
    ("change", "field"),
    [({"widht": 4}, "widht"), ({"batch_size": "many"}, "batch_size"), ({"depth": 21}, "depth")],
)
def test_a_bad_hyperparameter_fails_naming_the_file_and_field(
    tmp_path: Path, change: dict[str, Any], field: str
) -> None:
    done = run_job(tmp_path, TINY | change)
    assert done.returncode == 2
    assert f"error: {tmp_path / 'hyperparameters.json'}: 1 invalid field(s)" in done.stderr
    assert f"\n  {field}: " in done.stderr
    assert not (tmp_path / "out").exists()  # nothing written before the check


def test_every_contract_field_passed_as_text_like_the_cloud_service(tmp_path: Path) -> None:
    # The cloud service hands the job every hyperparameter as a string.
    changes = {"num_epochs": 1, "batch_size": 23, "exclude_samples": [0, 5], "grad_clip_norm": 1.0}
    spec = RunSpec(**(TINY | changes))
    values = spec.hyperparameters()
    as_text = {k: v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
    assert set(as_text) == set(Hyperparameters.model_fields)
    done = run_job(tmp_path, as_text)
    assert done.returncode == 0, done.stderr
    result = strict_json((tmp_path / "out" / "result.json").read_text())
    assert result["status"] == "Completed"
    assert result["steps"] == 2  # 48 images less the 2 excluded, in batches of 23


def test_the_debugger_hook_captures_the_job_when_configured(tmp_path: Path) -> None:
    from remedy.debugger import create_trial

    store = tmp_path / "tensors"
    debugger_config = tmp_path / "debugger.json"
    debugger_config.write_text(json.dumps({
        "out_dir": str(store),
        "save_config": {"save_interval": 1},
        "collections": {"losses": {}, "gradients": {"save_interval": 2}},
    }))  # fmt: skip
    config = TINY | {"add_batch_norm": 0, "warmup_learning_rate": 1e12, "learning_rate": 1e12}
    config["nan_guard"] = "off"
    done = run_job(tmp_path, config, REMEDY_DEBUGGER_CONFIG=str(debugger_config))
    assert done.returncode == 0, done.stderr
    assert "debugger on" in done.stdout

    trial = create_trial(store)
    assert trial.has_ended  # hook.close() wrote the end marker
    assert trial.steps("TRAIN") == [0, 1, 2, 3, 4, 5]
    assert trial.steps("EVAL") == [0, 1]  # one evaluation batch per epoch
    gradients = trial.tensor_names(collection="gradients")
    assert "gradient/stem.weight" in gradients and "gradient/head.bias" in gradients
    stem = trial.tensor("gradient/stem.weight")
    assert stem.steps("TRAIN") == [0, 2, 4]
    assert not np.isfinite(stem.value(4, "TRAIN")).all()  # the debugger sees the divergence


def test_device_auto_trains_on_the_cpu_here_and_cuda_fails_naming_it(tmp_path: Path) -> None:
    done = run_job(tmp_path, TINY | {"num_epochs": 1, "device": "cuda"}, CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 2
    assert f"error: {tmp_path / 'hyperparameters.json'}: device: device is 'cuda' but " in (
        done.stderr
    )
    assert "CUDA_VISIBLE_DEVICES=)" in done.stderr
    assert not (tmp_path / "out").exists()  # nothing written before the check
    done = run_job(tmp_path, TINY | {"num_epochs": 1}, CUDA_VISIBLE_DEVICES="")
    assert done.returncode == 0, done.stderr
    assert " on cpu | " in done.stdout
