"""What a job is started with: command line, working directory, import path, environment."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from remedy.debugger.config import CONFIG_ENV_VAR
from remedy.jobs.local import LocalBackend
from remedy.jobs.local.environment import job_launch, thread_variables
from remedy.jobs.local.escalation import Escalation
from remedy.jobs.local.layout import JobPaths
from remedy.outlets.notifications import NOTIFY_SECRET_ENV, NOTIFY_URLS_ENV
from remedy.state_schema import JobStatus, RunSpec
from remedy.state_schema import job_env as names
from remedy.state_schema.private import PRIVATE_FIELDS
from remedy.training.guard import RULE_STATUS_DIR_ENV
from tests.helpers.local_jobs import wait_final

ENTRY_POINTS = Path(__file__).with_name("entry_points").resolve()
SECRETS = {
    NOTIFY_URLS_ENV: "mailto://me:pw@example.com",
    NOTIFY_SECRET_ENV: "remedy-notify",
    "MY_SERVICE_TOKEN": "tok-123",
    "DB_PASSWORD": "hunter2",
    "openai_api_key": "sk-456",
    "HF_TOKEN": "hf-789",
}
KEPT = {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "aws-secret", "HARMLESS": "1"}
FLAGS = {"lr": 0.5, "tied": True, "dry-run": False, "save": None, "sizes": [2, 3], "name": "a b"}


def dump(backend: LocalBackend, job: str, spec: RunSpec) -> dict:
    backend.launch(job, spec)
    description = wait_final(backend, job)
    assert description.status is JobStatus.Completed, backend.logs(job)
    return json.loads((backend.paths(job).root / "dump.json").read_text())


@pytest.fixture
def backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalBackend:
    for name, value in (SECRETS | KEPT).items():
        monkeypatch.setenv(name, value)
    for name in (names.TORCH_THREADS_ENV, *names.THREAD_ENVS, "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    return LocalBackend(tmp_path / "run")


def test_a_script_sees_the_documented_environment(backend: LocalBackend) -> None:
    spec = RunSpec(
        source_dir=str(ENTRY_POINTS),
        entry_point="dump_env.py",
        hyperparameters=FLAGS,
        nan_guard="skip",
        rules=[],
    )
    seen = dump(backend, "script", spec)
    job = backend.paths("script")
    # as `cd source_dir && python dump_env.py --lr 0.5 ...`
    assert seen["argv"] == ["dump_env.py", "--lr", "0.5", "--tied", "True"] + [
        "--dry-run", "False", "--sizes", "2", "3", "--name", "a b",
    ]  # fmt: skip
    assert seen["cwd"] == str(ENTRY_POINTS) and seen["sys_path_0"] == str(ENTRY_POINTS)
    env = seen["env"]
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(ENTRY_POINTS)
    # the cloud toolkit's names
    assert env["SM_MODEL_DIR"] == str(job.model) and job.model.is_dir()
    assert env["SM_OUTPUT_DATA_DIR"] == str(job.output_data) and job.output_data.is_dir()
    assert json.loads(env["SM_HPS"]) == FLAGS
    assert (env["SM_HP_LR"], env["SM_HP_TIED"], env["SM_HP_DRY-RUN"]) == ("0.5", "true", "false")
    assert (env["SM_HP_SAVE"], env["SM_HP_SIZES"], env["SM_HP_NAME"]) == ("", "[2,3]", "a b")
    assert env["SM_NUM_CPUS"] == str(os.cpu_count()) and int(env["SM_NUM_GPUS"]) >= 0
    assert (env["SM_CURRENT_HOST"], json.loads(env["SM_HOSTS"])) == ("algo-1", ["algo-1"])
    training_env = json.loads(env["SM_TRAINING_ENV"])
    assert training_env["user_entry_point"] == "dump_env.py"
    assert training_env["module_dir"] == str(ENTRY_POINTS)
    assert training_env["hyperparameters"] == FLAGS and training_env["job_name"] == "script"
    # ours
    assert env["REMEDY_OUTPUT_DIR"] == str(job.root)
    assert env["REMEDY_CHECKPOINT_DIR"] == str(job.checkpoints) and job.checkpoints.is_dir()
    assert env["REMEDY_DEBUGGER_CONFIG"] == str(job.debugger_config)
    assert env["REMEDY_STOP_FILE"] == str(job.stop_request)
    assert env["REMEDY_RULE_STATUS_DIR"] == str(job.rule_status)
    assert env["REMEDY_NAN_GUARD"] == "skip"
    threads = str(max(1, (os.cpu_count() or 2) - 1))
    assert env["REMEDY_TORCH_THREADS"] == env["OMP_NUM_THREADS"] == threads
    assert env["MKL_NUM_THREADS"] == threads


@pytest.mark.adversarial("secrets and access", fails_as="leaked")
def test_no_secret_reaches_the_job_or_its_files(backend: LocalBackend) -> None:
    spec = RunSpec(source_dir=str(ENTRY_POINTS), entry_point="dump_env.py", rules=[])
    env = dump(backend, "secrets", spec)["env"]
    assert not set(SECRETS) & set(env)
    assert {name: env.get(name) for name in KEPT} == KEPT  # cloud credentials stay
    written = "".join(
        p.read_text(errors="replace")
        for p in backend.paths("secrets").root.rglob("*")
        if p.is_file()
    )
    assert not [value for value in SECRETS.values() if value in written]


@pytest.mark.adversarial("secrets and access", fails_as="leaked")
def test_no_process_of_a_job_holds_a_secret(backend: LocalBackend) -> None:
    """The supervisor and the evaluator too: /proc/PID/environ of every process of the job."""
    spec = RunSpec(entry_point="tests.jobs.entry_points.gated")
    backend.launch("job", spec)
    status_file = backend.paths("job").status
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        status = json.loads(status_file.read_text()) if status_file.exists() else {}
        if status.get("evaluator_pid") and status.get("training_pid"):
            break
        time.sleep(0.1)
    try:
        for role in ("supervisor_pid", "training_pid", "evaluator_pid"):
            environ = Path(f"/proc/{status[role]}/environ").read_bytes().decode(errors="replace")
            names = {entry.split("=", 1)[0] for entry in environ.split("\0") if entry}
            assert not set(SECRETS) & names, role
            assert "AWS_ACCESS_KEY_ID" in names, role  # the cloud credentials stay
    finally:
        backend.stop("job")


def test_a_module_is_found_in_source_dir_first(backend: LocalBackend, tmp_path: Path) -> None:
    code = tmp_path / "code"
    (code / "lm").mkdir(parents=True)
    (code / "lm" / "__init__.py").write_text("")
    (code / "lm" / "main.py").write_text((ENTRY_POINTS / "dump_env.py").read_text())
    spec = RunSpec(
        source_dir=str(code), entry_point="lm.main", hyperparameters={"epochs": 2}, rules=[]
    )
    seen = dump(backend, "module", spec)
    assert seen["argv"] == [str(code / "lm" / "main.py"), "--epochs", "2"]  # as python -m
    assert seen["cwd"] == str(code)


def test_a_warm_start_checkpoint_is_placed_before_the_script_starts(
    backend: LocalBackend, tmp_path: Path
) -> None:
    checkpoint = tmp_path / "earlier" / "epoch-0002"
    checkpoint.mkdir(parents=True)
    (checkpoint / "checkpoint.json").write_text(json.dumps({"epoch": 2, "step": 40}))
    (checkpoint / "model.pt").write_bytes(b"weights")
    spec = RunSpec(
        source_dir=str(ENTRY_POINTS),
        entry_point="dump_env.py",
        init_checkpoint=str(checkpoint),
        start_epoch=2,
        rules=[],
    )
    assert dump(backend, "warm", spec)["checkpoints"] == ["epoch-0002"]
    placed = backend.paths("warm").checkpoints / "epoch-0002"
    assert (placed / "model.pt").read_bytes() == b"weights"
    assert [(c.epoch, c.step) for c in backend.checkpoints("warm")] == [(2, 40)]


def test_a_missing_warm_start_launches_nothing(backend: LocalBackend, tmp_path: Path) -> None:
    spec = RunSpec(entry_point="dump_env.py", init_checkpoint=str(tmp_path / "gone"), rules=[])
    with pytest.raises(FileNotFoundError, match="run_spec.init_checkpoint"):
        backend.launch("cold", spec)
    assert not backend.exists("cold")


def test_the_built_in_job_keeps_its_command_and_gets_the_same_environment(tmp_path: Path) -> None:
    paths = JobPaths(tmp_path / "job")
    launch = job_launch(RunSpec(), "builtin", paths, environ={})
    assert launch.command == [
        sys.executable, "-m", "remedy.training.train",
        "--hyperparameters", str(paths.hyperparameters), "--output-dir", str(paths.root),
    ]  # fmt: skip
    assert launch.cwd == str(Path.cwd())
    assert json.loads(launch.env["SM_HPS"]) == RunSpec().hyperparameters()
    assert launch.env["SM_HP_LEARNING_RATE"] == "0.1"
    assert launch.env["REMEDY_NAN_GUARD"] == "stop" and "PYTHONPATH" not in launch.env
    every_job = {names.OUTPUT_DIR_ENV, names.CHECKPOINT_DIR_ENV, names.STOP_FILE_ENV}
    assert every_job | {names.TORCH_THREADS_ENV, *names.THREAD_ENVS} <= set(launch.env)
    assert names.MAX_UPDATES_ENV not in launch.env  # a full launch: the job's own length
    probe = job_launch(RunSpec(max_updates=50), "probe", paths, environ={})
    assert probe.env[names.MAX_UPDATES_ENV] == "50"


def test_script_and_module_commands_go_through_the_launcher(tmp_path: Path) -> None:
    paths = JobPaths(tmp_path / "job")
    script = RunSpec(entry_point="src/train.py", hyperparameters={"lr": 1e-05, "b": 8})
    module = RunSpec(entry_point="pkg.train", hyperparameters={"tied": True}, bare_flags=["tied"])
    launcher = [sys.executable, "-m", "remedy.training.launch"]
    assert job_launch(script, "s", paths, {}).command == launcher + ["src/train.py"] + [
        "--lr",
        "1e-05",
        "-b",
        "8",
    ]
    assert job_launch(module, "m", paths, {}).command == launcher + ["-m", "pkg.train", "--tied"]


def test_thread_counts_set_in_the_flows_environment_win() -> None:
    assert thread_variables({"REMEDY_TORCH_THREADS": "3"}) == {
        "REMEDY_TORCH_THREADS": "3",
        "OMP_NUM_THREADS": "3",
        "MKL_NUM_THREADS": "3",
    }
    assert thread_variables({"OMP_NUM_THREADS": "1"})["OMP_NUM_THREADS"] == "1"


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("REMEDY_NOTIFY_URLS", True),
        ("REMEDY_NOTIFY_SECRET", True),
        ("GITHUB_TOKEN", True),
        ("my_password", True),
        ("PREFECT_API_KEY", True),
        ("AWS_SECRET_ACCESS_KEY", False),
        ("AWS_SESSION_TOKEN", False),
        ("PREFECT_API_URL", False),
        ("PATH", False),
    ],
)
def test_which_variables_are_secrets(name: str, secret: bool) -> None:
    assert names.is_secret(name) is secret


def test_the_names_are_the_ones_their_readers_use() -> None:
    assert names.DEBUGGER_CONFIG_ENV == CONFIG_ENV_VAR
    assert names.RULE_STATUS_DIR_ENV == RULE_STATUS_DIR_ENV
    private = set(PRIVATE_FIELDS.values())  # the flow's role and bucket
    assert {NOTIFY_URLS_ENV, NOTIFY_SECRET_ENV} | private == set(names.SECRET_ENVS)


def test_the_escalation_timeline() -> None:
    escalation = Escalation(grace_s=10, kill_after_s=20)
    assert escalation.signal_due(100.0) is None  # the stop file was just written
    assert escalation.signal_due(109.9) is None
    assert escalation.signal_due(110.0) is signal.SIGTERM
    assert escalation.signal_due(129.9) is None
    assert escalation.signal_due(130.0) is signal.SIGKILL
    assert escalation.signal_due(200.0) is None  # each signal once
    urgent = Escalation(grace_s=10, kill_after_s=20)
    assert urgent.signal_due(0.0, urgent=True) is signal.SIGTERM  # the supervisor got SIGTERM


def test_path_roles_get_the_jobs_model_folder_and_its_warm_start(tmp_path: Path) -> None:
    paths = JobPaths(tmp_path / "job")
    spec = RunSpec.model_validate(
        {
            "entry_point": "train.py",
            "hyperparameters": {"lr": 0.1},
            "hyperparameter_roles": {"output_dir": "work-dir", "resume": "resume"},
        }
    )
    launch = job_launch(spec, "s", paths, {})
    assert launch.command[-4:] == ["--lr", "0.1", "--work-dir", str(paths.model)]
    warm = spec.model_copy(update={"init_checkpoint": str(tmp_path / "old" / "step-40")})
    launch = job_launch(warm, "s", paths, {})
    assert launch.command[-2:] == ["--resume", str(paths.checkpoints / "step-40")]
    assert json.loads(launch.env["SM_HPS"])["work-dir"] == str(paths.model)
