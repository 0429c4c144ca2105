"""The program the cloud service's training toolkit runs (sagemaker_program): remedy's
launcher around the user's entry point, as the local backend runs it.

This file is packed into sourcedir.tar.gz beside the user's code (source.py) and runs in the
training image, where nothing of remedy may be installed: it imports the standard library
only, and remedy's modules only when they are there.

- The job's flags are rebuilt from the toolkit's hyperparameters file with remedy's own
  rules (remedy.state_schema.flag_arguments: `true` a bare flag, lists spread), not taken
  from the toolkit's command line (which writes `--tied True`, `--sizes [1, 2]`).
- remedy installed in the image: `python -m remedy.training.launch ENTRY FLAGS` (zero-code
  capture into the s3:// store REMEDY_DEBUGGER_CONFIG names, NaN guard, clean stop on the
  service's SIGTERM); the built-in job as `python -m remedy.training.train`.
  Not installed: the script runs plainly with the toolkit's arguments, and the log says
  that nothing is captured (the rules then report Error: they read nothing).
- SIGTERM (StopTrainingJob) is passed on to the job. When the job has ended, the small
  files remedy's launcher wrote (result.json, progress.json, the NaN guard's rule status)
  are uploaded to REMEDY_REPORT_URI, where the orchestrator reads them.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

PREFIX = "remedy sagemaker entry:"
BUILTIN = "remedy.training.train"
HYPERPARAMETERS_FILE = "/opt/ml/input/config/hyperparameters.json"
REPORTED = ("result.json", "progress.json", "metrics.jsonl")


def log(line: str) -> None:
    print(f"{PREFIX} {line}", flush=True)


def hyperparameters(path: str) -> dict[str, object]:
    """The job's own hyperparameters, decoded as the cloud SDK encoded them (JSON)."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}
    found = {}
    for name, value in raw.items():
        if name.startswith("sagemaker_"):
            continue
        try:
            found[name] = json.loads(value)
        except (TypeError, ValueError):
            found[name] = value
    return found


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def command(entry_point: str, values: dict[str, object], toolkit_args: list[str]) -> list[str]:
    output_dir = os.environ.get("REMEDY_OUTPUT_DIR", "/opt/ml/output/data/remedy")
    if entry_point == BUILTIN:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        hyperparameters_file = Path(output_dir) / "hyperparameters.json"
        hyperparameters_file.write_text(json.dumps(values))
        return [sys.executable, "-m", BUILTIN, "--hyperparameters", str(hyperparameters_file),
                "--output-dir", output_dir]  # fmt: skip
    target = [entry_point] if entry_point.endswith(".py") else ["-m", entry_point]
    if not installed("remedy.training.launch"):
        log("remedy is not installed in this image: the job runs without capture, NaN guard "
            "or progress files (install remedy-train in the image, see docs/cloud.md)")  # fmt: skip
        return [sys.executable, *target, *toolkit_args]
    from remedy.state_schema import flag_arguments

    return [sys.executable, "-m", "remedy.training.launch", *target, *flag_arguments(values)]


def upload_reports(output_dir: Path, uri: str) -> None:
    """result.json, progress.json, metrics.jsonl and rule_status/*.json to uri (single PUTs)."""
    if not uri.startswith("s3://") or not installed("boto3"):
        return
    import boto3

    bucket, _, prefix = uri[len("s3://") :].partition("/")
    prefix = prefix.strip("/")
    client = boto3.client("s3")
    files = [output_dir / name for name in REPORTED]
    files += sorted((output_dir / "rule_status").glob("*.json"))
    for path in files:
        if path.is_file():
            key = f"{prefix}/{path.relative_to(output_dir).as_posix()}".lstrip("/")
            client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())


def main(argv: list[str]) -> int:
    entry_point = os.environ.get("REMEDY_ENTRY_POINT", "")
    if not entry_point:
        log("REMEDY_ENTRY_POINT is not set")
        return 2
    config_dir = os.environ.get("SM_INPUT_CONFIG_DIR")
    path = os.path.join(config_dir, "hyperparameters.json") if config_dir else HYPERPARAMETERS_FILE
    if os.environ.get("REMEDY_DEBUGGER_CONFIG") is None:
        os.environ["REMEDY_DEBUGGER_CONFIG"] = str(Path(__file__).parent / ".remedy/debugger.json")
    child = subprocess.Popen(command(entry_point, hyperparameters(path), argv))

    def pass_on(signum: int, frame: object) -> None:
        child.send_signal(signum)

    signal.signal(signal.SIGTERM, pass_on)
    signal.signal(signal.SIGINT, pass_on)
    code = child.wait()
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0's files
        try:
            output_dir = Path(os.environ.get("REMEDY_OUTPUT_DIR", "/opt/ml/output/data/remedy"))
            upload_reports(output_dir, os.environ.get("REMEDY_REPORT_URI", ""))
        except Exception as error:  # the job's own result stands
            log(f"could not upload remedy's report files: {type(error).__name__}")
    return code if code >= 0 else 128 - code  # killed by a signal: the shell's status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
