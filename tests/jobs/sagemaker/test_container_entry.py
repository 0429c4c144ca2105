"""remedy's entry program as the toolkit runs it in the training image: the flags rebuilt
from the toolkit's hyperparameters file, the script run under remedy's launcher, its
report files uploaded to the bucket (moto's S3 server) at the end."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
import pytest

from remedy.jobs.sagemaker.source import ENTRY_PROGRAM
from tests.jobs.sagemaker.conftest import BUCKET

SCRIPT = """
import json, sys, torch
json.dump(sys.argv[1:], open("argv.json", "w"))
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    opt.zero_grad()
    model(torch.ones(4, 2)).pow(2).mean().backward()
    opt.step()
"""


@pytest.mark.parametrize(
    ("command_line", "expected"),
    [
        (  # the default style; store_true switches named in bare_flags
            {"bare_flags": ["tied", "off"]},
            ["--lr", "0.1", "--optimizer", "adam", "--tied", "--sizes", "2", "3"],
        ),
        (  # a configurator: a config file, then --key=value, booleans explicit
            {"hyperparameter_style": "--name=value", "arguments": ["cfg.py"]},
            [
                "cfg.py",
                "--lr=0.1",
                "--optimizer=adam",
                "--tied=True",
                "--off=False",
                "--sizes=[2, 3]",
            ],
        ),
    ],
    ids=["bare-flags", "key-equals-value"],
)
def test_the_entry_program_runs_the_script_under_the_launcher(
    aws: str, tmp_path: Path, command_line: dict, expected: list[str]
) -> None:
    code, config, output = tmp_path / "code", tmp_path / "config", tmp_path / "output"
    for folder in (code, config, output):
        folder.mkdir()
    (code / "train.py").write_text(SCRIPT)
    entry = Path(__file__).parents[3] / "jobs/sagemaker/container_entry.py"
    (code / ENTRY_PROGRAM).write_text(entry.read_text())
    # the toolkit's file: every value JSON-encoded by the SDK, plus its own entries
    encoded = {"lr": "0.1", "optimizer": '"adam"', "tied": "true", "off": "false",
               "sizes": "[2, 3]", "sagemaker_program": json.dumps(ENTRY_PROGRAM)}  # fmt: skip
    (config / "hyperparameters.json").write_text(json.dumps(encoded))
    store = tmp_path / "tensors"
    debugger = {"out_dir": str(store), "collections": {"losses": {"save_interval": 1}}}
    (code / "debugger.json").write_text(json.dumps(debugger))
    env = os.environ | {
        "SM_INPUT_CONFIG_DIR": str(config),
        "REMEDY_ENTRY_POINT": "train.py",
        "REMEDY_OUTPUT_DIR": str(output),
        "REMEDY_DEBUGGER_CONFIG": str(code / "debugger.json"),
        "REMEDY_REPORT_URI": f"s3://{BUCKET}/remedy/entry-job/remedy",
        "REMEDY_TORCH_THREADS": "1",
        "REMEDY_COMMAND_LINE": json.dumps(command_line),
    }
    # the toolkit's own command line, which the program does not use for remedy's flags
    toolkit_args = ["--lr", "0.1", "--tied", "True", "--sizes", "[2, 3]"]
    done = subprocess.run([sys.executable, ENTRY_PROGRAM, *toolkit_args], cwd=code, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    argv = json.loads((code / "argv.json").read_text())
    assert argv == expected
    assert (store / "end.json").exists()  # captured with zero code
    body = boto3.client("s3").get_object(Bucket=BUCKET, Key="remedy/entry-job/remedy/result.json")
    assert json.loads(body["Body"].read())["status"] == "Completed"


def test_without_remedy_in_the_image_another_style_stops_the_job_saying_why(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entry = Path(__file__).parents[3] / "jobs/sagemaker/container_entry.py"
    spec = importlib.util.spec_from_file_location("container_entry_copy", entry)
    assert spec is not None and spec.loader is not None
    program = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(program)
    # an image without remedy: nothing here can uninstall it, so the look-up says so
    monkeypatch.setattr(program, "installed", lambda module: False)
    monkeypatch.setenv("REMEDY_COMMAND_LINE", json.dumps({"hyperparameter_style": "name=value"}))
    needs = "hyperparameter_style, arguments, bare_flags and keys of a config file need"
    with pytest.raises(SystemExit, match=needs):
        program.command("train.py", {"lr": 0.1}, ["--lr", "0.1"])
    monkeypatch.setenv("REMEDY_COMMAND_LINE", "{}")  # the toolkit's style, but a config key
    monkeypatch.setenv("REMEDY_CONFIG_EDITS", json.dumps({"c.yaml": {"lr": 0.1}}))
    with pytest.raises(SystemExit, match=needs):
        program.command("train.py", {}, [])
    monkeypatch.delenv("REMEDY_CONFIG_EDITS")
    monkeypatch.setenv("REMEDY_COMMAND_LINE", json.dumps({"hyperparameter_style": "--name value"}))
    assert program.command("train.py", {"lr": 0.1}, ["--lr", "0.1"])[1:] == [
        "train.py", "--lr", "0.1"
    ]  # fmt: skip


def test_the_entry_programs_own_file_names_are_the_job_contracts() -> None:
    """The entry program imports the standard library only, so it spells the job's file
    names itself: they must be the ones the job writes (state_schema/job_env.py)."""
    from remedy.jobs.sagemaker import container_entry
    from remedy.state_schema import job_env

    names = {job_env.PROGRESS_FILE, job_env.RESULT_FILE, job_env.METRICS_FILE}
    assert set(container_entry.REPORTED) == names
    assert set(container_entry.LIVE) == {job_env.PROGRESS_FILE}
    assert container_entry.RULE_STATUS_DIR == job_env.RULE_STATUS_DIR
    assert container_entry.CONFIG_EDITS_ENV == job_env.CONFIG_EDITS_ENV


def test_the_result_is_sent_last_so_whoever_has_it_has_the_rest(aws: str, tmp_path: Path) -> None:
    """The orchestrator mirrors a job's reports again only while it has no result: sent
    before the last progress.json, a result once left a completed run read a step short."""
    from remedy.jobs.sagemaker import container_entry

    output = tmp_path / "output"
    (output / container_entry.RULE_STATUS_DIR).mkdir(parents=True)
    names = [*container_entry.REPORTED, f"{container_entry.RULE_STATUS_DIR}/ExplodingTensor.json"]
    for name in names:
        (output / name).write_text("{}")
    reports = container_entry.Reports(output, f"s3://{BUCKET}/remedy/job/remedy")
    sent: list[str] = []
    put = reports.client.put_object

    def recorded(**request: object) -> object:
        sent.append(str(request["Key"]).removeprefix("remedy/job/remedy/"))
        return put(**request)

    reports.client.put_object = recorded
    reports.upload(container_entry.REPORTED)
    assert sorted(sent) == sorted(names) and sent[-1] == container_entry.RESULT
