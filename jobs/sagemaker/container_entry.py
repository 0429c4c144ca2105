"""The program the cloud service's training toolkit runs (sagemaker_program): remedy's
launcher around the user's entry point, as the local backend runs it.

This file is packed into sourcedir.tar.gz beside the user's code (source.py) and runs in the
training image, where nothing of remedy may be installed: it imports the standard library
only, and remedy's modules only when they are there.

- The job's flags are rebuilt from the toolkit's hyperparameters file with remedy's own
  rules (remedy.state_schema.flags.command_line, in the run_spec's hyperparameter_style,
  after its arguments, with its bare_flags: all three in REMEDY_COMMAND_LINE), not taken from
  the toolkit's command line (which writes `--sizes [1, 2]`).
- remedy installed in the image: `python -m remedy.training.launch ENTRY FLAGS` (zero-code
  capture into the s3:// store REMEDY_DEBUGGER_CONFIG names, NaN guard, clean stop on the
  service's SIGTERM); the built-in job as `python -m remedy.training.train`.
  Not installed: the script runs plainly with the toolkit's arguments, and the log says
  that nothing is captured (the rules then report Error: they read nothing).
- SIGTERM (StopTrainingJob) is passed on to the job. The small files remedy's launcher
  writes go to REMEDY_REPORT_URI, where the orchestrator reads them: progress.json and the
  NaN guard's rule statuses while the job runs (every REPORT_INTERVAL_S, when changed: the
  guard's finding and a warm start's step are known before the job ends), and all of them
  (result.json, metrics.jsonl too) when it has ended.
- The built-in job keeps its checkpoints in REMEDY_CHECKPOINT_DIR (which the service syncs
  to the bucket), and a warm start's init_checkpoint under /opt/ml/checkpoints is the folder
  the service restored there.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

PREFIX = "remedy sagemaker entry:"
BUILTIN = "remedy.training.train"
HYPERPARAMETERS_FILE = "/opt/ml/input/config/hyperparameters.json"
CHECKPOINT_DIR = "/opt/ml/checkpoints"  # CheckpointConfig.LocalPath (layout.py)
# The job's files (state_schema/job_env.py's names, spelled here: a test ties them)
LIVE = ("progress.json",)  # and RULE_STATUS_DIR/*.json: sent while the job runs
RESULT = "result.json"
# At the end, with RULE_STATUS_DIR/*.json; the result last: whoever sees it has all the
# job sent before it (the orchestrator mirrors the reports again only while it has none).
REPORTED = ("progress.json", "metrics.jsonl", RESULT)
RULE_STATUS_DIR = "rule_status"
REPORT_INTERVAL_S = 5.0
TOOLKIT_STYLE = "--name value"  # how the toolkit itself passes hyperparameters
CONFIG_EDITS_ENV = "REMEDY_CONFIG_EDITS"  # job_env.py's: the launcher writes the copies


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
        checkpoints = os.environ.get("REMEDY_CHECKPOINT_DIR", CHECKPOINT_DIR)
        warm = values.get("init_checkpoint")
        if isinstance(warm, str) and warm.startswith(CHECKPOINT_DIR + "/"):
            values = values | {"init_checkpoint": checkpoints + warm[len(CHECKPOINT_DIR) :]}
        hyperparameters_file = Path(output_dir) / "hyperparameters.json"
        hyperparameters_file.write_text(json.dumps(values))
        return [sys.executable, "-m", BUILTIN, "--hyperparameters", str(hyperparameters_file),
                "--output-dir", output_dir, "--checkpoint-dir", checkpoints]  # fmt: skip
    target = [entry_point] if entry_point.endswith(".py") else ["-m", entry_point]
    form = json.loads(os.environ.get("REMEDY_COMMAND_LINE") or "{}")
    if not installed("remedy.training.launch"):
        if (
            any(form.get(key) for key in ("arguments", "bare_flags"))
            or form.get("hyperparameter_style", TOOLKIT_STYLE) != TOOLKIT_STYLE
            or os.environ.get(CONFIG_EDITS_ENV)
        ):
            raise SystemExit(
                f"{PREFIX} run_spec's hyperparameter_style, arguments, bare_flags and keys "
                "of a config file need remedy installed in the image (install remedy-train, "
                "see docs/cloud.md): the toolkit alone passes --name value"
            )
        log("remedy is not installed in this image: the job runs without capture, NaN guard "
            "or progress files (install remedy-train in the image, see docs/cloud.md)")  # fmt: skip
        return [sys.executable, *target, *toolkit_args]
    from remedy.state_schema.flags import command_line

    flags = command_line(
        values,
        form.get("hyperparameter_style", TOOLKIT_STYLE),
        form.get("arguments", []),
        form.get("bare_flags", []),
    )
    return [sys.executable, "-m", "remedy.training.launch", *target, *flags]


class Reports:
    """remedy's small files in the job's output folder, copied to `uri` (single PUTs), each
    only when it changed since it was last sent."""

    def __init__(self, output_dir: Path, uri: str) -> None:
        self.output_dir = output_dir
        self.bucket, _, prefix = uri[len("s3://") :].partition("/")
        self.prefix = prefix.strip("/")
        self.sent: dict[Path, tuple[int, int, int]] = {}
        import boto3

        self.client = boto3.client("s3")

    def upload(self, names: tuple[str, ...]) -> None:
        files = [self.output_dir / name for name in names if name != RESULT]
        files += sorted((self.output_dir / RULE_STATUS_DIR).glob("*.json"))
        files += [self.output_dir / name for name in names if name == RESULT]
        for path in files:
            try:
                info = path.stat()
            except FileNotFoundError:
                continue
            stamp = (info.st_mtime_ns, info.st_size, info.st_ino)
            if self.sent.get(path) == stamp:
                continue
            key = f"{self.prefix}/{path.relative_to(self.output_dir).as_posix()}".lstrip("/")
            self.client.put_object(Bucket=self.bucket, Key=key, Body=path.read_bytes())
            self.sent[path] = stamp

    def follow(self, child: subprocess.Popen[bytes], interval_s: float) -> None:
        """While the job runs: progress.json and rule statuses every interval_s."""
        failed = False
        while True:
            try:
                child.wait(timeout=interval_s)
                return
            except subprocess.TimeoutExpired:
                pass
            try:
                self.upload(LIVE)
            except Exception as error:  # the next round tries again; said once
                if not failed:
                    log(f"could not upload remedy's progress files: {type(error).__name__}")
                failed = True


def reports(uri: str) -> Reports | None:
    if not uri.startswith("s3://") or not installed("boto3"):
        return None
    output_dir = Path(os.environ.get("REMEDY_OUTPUT_DIR", "/opt/ml/output/data/remedy"))
    return Reports(output_dir, uri)


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
    sender = None
    if os.environ.get("RANK", "0") == "0":  # under torchrun, rank 0's files
        try:
            sender = reports(os.environ.get("REMEDY_REPORT_URI", ""))
        except Exception as error:  # no client: the job runs all the same
            log(f"cannot upload remedy's report files: {type(error).__name__}")
    follower = None
    if sender is not None:
        follower = threading.Thread(target=sender.follow, args=(child, REPORT_INTERVAL_S))
        follower.daemon = True
        follower.start()
    code = child.wait()
    if follower is not None:
        follower.join(timeout=60)
    if sender is not None:
        try:
            sender.upload(REPORTED)
        except Exception as error:  # the job's own result stands
            log(f"could not upload remedy's report files: {type(error).__name__}")
    return code if code >= 0 else 128 - code  # killed by a signal: the shell's status


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
