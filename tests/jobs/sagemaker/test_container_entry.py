"""remedy's entry program as the toolkit runs it in the training image: the flags rebuilt
from the toolkit's hyperparameters file, the script run under remedy's launcher, its
report files uploaded to the bucket (moto's S3 server) at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import boto3
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


def test_the_entry_program_runs_the_script_under_the_launcher(aws: str, tmp_path: Path) -> None:
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
    }
    # the toolkit's own command line, which the program does not use for remedy's flags
    toolkit_args = ["--lr", "0.1", "--tied", "True", "--sizes", "[2, 3]"]
    done = subprocess.run([sys.executable, ENTRY_PROGRAM, *toolkit_args], cwd=code, env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    argv = json.loads((code / "argv.json").read_text())
    assert argv == ["--lr", "0.1", "--optimizer", "adam", "--tied", "--sizes", "2", "3"]
    assert (store / "end.json").exists()  # captured with zero code
    body = boto3.client("s3").get_object(Bucket=BUCKET, Key="remedy/entry-job/remedy/result.json")
    assert json.loads(body["Body"].read())["status"] == "Completed"
