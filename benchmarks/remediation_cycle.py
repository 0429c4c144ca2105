"""Detection latency and cycle overhead of one remediation cycle, measured on real jobs.

    python benchmarks/remediation_cycle.py [--save-intervals 5 1]

For each gradient save interval it runs the remediate flow on the demo scenario (ELU
ResNet-20 without batch norm, which really explodes) with a budget of two launches, then
reads the run directory and prints:

- detection latency: from the first training step whose gradient is non-finite (the job's
  metrics log the total gradient norm, summed in float64, every step) to the training
  process gone, in steps and seconds, split into "rule fired" and "job stopped";
- cycle overhead: from the rule's IssuesFound to the relaunched job's first training step,
  split into the flow's part (poll, stop, plan, notify, launch) and the new process's start;
- as the baseline measured in the same run, the start of a bare training process (Python,
  torch, data, model) to its first step: the part of a cycle no orchestrator can remove.

The original workflow waited 300 s between monitor calls, so its detection alone took up
to 300 s plus the managed service's own rule-evaluation delay.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from remedy.cli.main import configure_prefect_environment  # noqa: E402

configure_prefect_environment()

from remedy.flows.remediate import RemediateSettings, remediate  # noqa: E402
from remedy.state_schema import Budgets, RunSpec, State  # noqa: E402
from remedy.training.demo import DEMO_RUN_SPEC  # noqa: E402


def seconds(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def measure(run_dir: Path, final: State) -> dict[str, float]:
    first, second = final.history.attempts[:2]
    job1, job2 = run_dir / "jobs" / first.job_name, run_dir / "jobs" / second.job_name
    steps = [m for m in read_lines(job1 / "metrics.jsonl") if m["type"] == "step"]
    bad = next(m for m in steps if m["grad_norm"] is None)
    last_step = steps[-1]["step"]
    status = json.loads((job1 / "status.json").read_text())
    rule = json.loads(next((job1 / "rule_status").glob("*.json")).read_text())
    fired = seconds(rule["LastModifiedTime"])
    gone = seconds(status["training_exited_at"])
    journal = read_lines(run_dir / "transitions.jsonl")
    relaunched = next(
        seconds(e["time"]) for e in journal if e["event"] == "launching" and e["job"] == job2.name
    )
    first_step_2 = read_lines(job2 / "metrics.jsonl")[0]["wall_time"]
    return {  # steps count updates from 1; the hook counts from 0 (hook step s = update s+1)
        "first update with a non-finite grad": bad["step"],
        "update whose gradients fired the rule": rule["step"] + 1,
        "updates until the job was gone": last_step - bad["step"],
        "s bad step -> IssuesFound": fired - bad["wall_time"],
        "s IssuesFound -> process gone": gone - fired,
        "s detection latency": gone - bad["wall_time"],
        "s IssuesFound -> relaunch": relaunched - fired,
        "s relaunch -> first step": first_step_2 - relaunched,
        "s cycle overhead": first_step_2 - fired,
    }


def bare_start_to_first_step(spec: RunSpec, workdir: Path) -> float:
    """A training process on its own: launch to first step (no flow, no debugger)."""
    hyper = workdir / "bare.json"
    hyper.write_text(json.dumps(spec.hyperparameters() | {"num_epochs": 1}))
    out = workdir / "bare"
    out.mkdir()
    started = time.time()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "remedy.training.train",
            "--hyperparameters",
            str(hyper),
            "--output-dir",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        env={"REMEDY_TORCH_THREADS": "1", "PATH": ""},
    )
    while not (out / "metrics.jsonl").exists() or not (out / "metrics.jsonl").read_text():
        time.sleep(0.01)
    first = read_lines(out / "metrics.jsonl")[0]["wall_time"]
    process.terminate()
    process.wait()
    return first - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save-intervals", type=int, nargs="+", default=[5, 1])
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="remedy-bench-"))
    # This machine's settings for the runs the benchmark starts in-process: they write
    # under its folder (tasks/allowed_code.py).
    os.environ["REMEDY_RUNS_DIR"] = str(workdir)
    rows: dict[int, dict[str, float]] = {}
    for interval in args.save_intervals:
        spec = RunSpec(**(DEMO_RUN_SPEC.model_dump() | {"debugger_save_interval": interval}))
        state = State(run_spec=spec, budgets=Budgets(max_num_retraining=2))
        run_dir = workdir / f"interval-{interval}"
        print(f"running two attempts with gradients saved every {interval} steps ...", flush=True)
        final = remediate(
            state=state,
            run_dir=str(run_dir),
            settings=RemediateSettings(poll_interval_s=2.0),
            return_state=True,
        ).result(raise_on_failure=False)  # a run that gave up is Failed, its payload the data
        rows[interval] = measure(run_dir, final)
    baseline = bare_start_to_first_step(DEMO_RUN_SPEC, workdir)

    print("\nremediation cycle on the demo scenario (monitor poll interval 2 s)")
    header = "".join(f"{f'save every {i}':>16}" for i in rows)
    print(f"{'':40}{header}")
    for key in next(iter(rows.values())):
        cells = "".join(f"{rows[i][key]:>16.2f}" for i in rows)
        print(f"{key:40}{cells}")
    print(f"\nbaseline, bare process start to first step: {baseline:.2f} s")
    for i, row in rows.items():
        ratio = row["s cycle overhead"] / baseline
        print(f"save every {i}: cycle overhead = {ratio:.2f} x the bare process start")
    print("original workflow: 300 s between monitor calls (detection alone up to 300 s)")


if __name__ == "__main__":
    main()
