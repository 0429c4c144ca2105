"""Do a run's own gradients tell an under-trained run from a trained one, where its loss
curve does not?

    nice python benchmarks/gradient_agreement.py [--length-scale 3] [--scripts NAME ...]
                                                 [--run-dir DIR]

The verdict calls clean a run at 1/30 of its rate whose loss slows as a converged run's
does (README, "Not reached yet": the VAE at the repair benchmark's length, the char
transformer and the GPT at three times it). This measures a candidate signal for that
question: how much consecutive gradients agree. Far from a minimum the mean gradient
dominates each batch's noise and successive gradients point the same way; near one the
noise dominates and they do not (Pflug's test of stationarity for SGD uses the same inner
products).

Each of benchmarks/repair_quality.py's four scripts (same flags, same data) runs twice, at
its intended rate and at 1/30 of it, --length-scale times as long, under the launcher
(`python -m remedy.training.launch`, as a local job runs it) with a tensor store that saves
every update's loss and gradients. From the store: the cosine similarity of the gradients
(all parameters as one vector) of updates t and t + lag, averaged over the first and the
last third of the run, at lags 1 and 5, beside the last third's share of the whole drop in
loss (the curve's measure the verdict reads) and the script's own final metric; then the
agreement as the job itself samples it into its step records (every few updates,
training/gradient_agreement.py), the figure the verdict reads, and whether the verdict
asks the run on them (records/verdict.py, gradients_agree). Prints figures; asserts
nothing. The README ("Not reached yet") records them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from remedy.debugger import create_trial  # noqa: E402
from remedy.debugger.hook import LOSS_TENSOR_NAME  # noqa: E402
from remedy.records.verdict import gradients_agree  # noqa: E402
from remedy.state_schema import Attempt, RunSpec  # noqa: E402
from remedy.state_schema.flags import command_line  # noqa: E402
from remedy.state_schema.gradient_agreement import AGREEMENT_EVERY, LAGS  # noqa: E402
from remedy.state_schema.job_env import (  # noqa: E402
    DEBUGGER_CONFIG_ENV,
    METRICS_FILE,
    OUTPUT_DIR_ENV,
    TORCH_THREADS_ENV,
)
from remedy.state_schema.loss_windows import loss_thirds  # noqa: E402
from remedy.strategies.outcomes import descent_figures  # noqa: E402

if TYPE_CHECKING:
    from benchmarks.repair_quality import Script

RATES = {"intended": 1.0, "1/30": 1 / 30}


@dataclass
class Figures:
    updates: int
    metric: float | None
    last_third_share: float  # of the whole drop in loss
    agreement: dict[int, tuple[float, float]]  # lag -> (first third, last third)
    sampled: list[float]  # the job's own, last third (lag 1, lag 5): what the verdict reads
    asked: bool  # whether the verdict asks the run on them


def run_script(script: Script, data: Path, factor: float, folder: Path) -> Figures:
    """The script at `factor` times its rate, every update's loss and gradients saved."""
    folder.mkdir(parents=True)
    lr_flag = script.roles["learning_rate"]
    spec = script.spec(data, "agreement", **{lr_flag: script.flags[lr_flag] * factor})
    config = folder / "debugger.json"
    every = {"save_interval": 1}
    store = folder / "tensors"
    config.write_text(
        json.dumps({"out_dir": str(store), "collections": {"losses": every, "gradients": every}})
    )
    env = os.environ | {
        DEBUGGER_CONFIG_ENV: str(config),
        TORCH_THREADS_ENV: "1",
        OUTPUT_DIR_ENV: str(folder / "job"),
    }
    entry = Path(spec["source_dir"]) / spec["entry_point"]
    command = [sys.executable, "-m", "remedy.training.launch", str(entry)]
    command += command_line(spec["hyperparameters"])
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    (folder / "output.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    found = re.findall(next(iter(spec["metric_definitions"]))["regex"], done.stdout)
    metric = float(found[-1]) if found else None
    records = (folder / "job" / METRICS_FILE).read_text().splitlines()
    return measure(store, metric, as_monitored([json.loads(line) for line in records if line]))


def as_monitored(records: list[dict[str, Any]]) -> Attempt:
    """The run's attempt as the monitor completes it from its step records (the agreement
    the job sampled, whether its batches were noisy): what the verdict asks on."""
    return Attempt(job_name="agreement", spec=RunSpec(), **descent_figures(records))


def measure(store: Path, metric: float | None, monitored: Attempt) -> Figures:
    trial = create_trial(str(store))
    names = [n for n in trial.tensor_names() if n.startswith("gradient/")]
    steps = trial.tensor(names[0]).steps()
    loss = trial.tensor(LOSS_TENSOR_NAME)
    losses = [float(loss.value(s)) for s in loss.steps()]

    def gradient(step: int) -> np.ndarray:
        parts = [trial.tensor(n).value(step).astype(np.float64).ravel() for n in names]
        return np.concatenate(parts)

    vectors = [gradient(s) for s in steps]
    norms = [float(np.linalg.norm(v)) for v in vectors]
    agreement = {}
    for lag in LAGS:
        cosines = np.array(
            [
                float(vectors[i] @ vectors[i + lag]) / max(norms[i] * norms[i + lag], 1e-300)
                for i in range(len(vectors) - lag)
            ]
        )
        third = len(cosines) // 3
        agreement[lag] = (float(cosines[:third].mean()), float(cosines[-third:].mean()))
    asked = gradients_agree(monitored) is not None
    return Figures(
        len(steps), metric, last_third_share(losses), agreement, monitored.gradient_agreement, asked
    )


def last_third_share(losses: list[float]) -> float:
    """The last third's share of the whole drop in loss, by the verdict's own windows
    (loss_thirds); NaN where the loss did not fall or the run is too short to tell."""
    thirds = loss_thirds(list(losses))
    if not thirds or thirds[0] <= thirds[3]:
        return float("nan")
    start, _, two_thirds, end = thirds
    return (two_thirds - end) / (start - end)


def main() -> None:
    # Imported here: repair_quality sets up Prefect's environment, which measure() needs not.
    from benchmarks.repair_quality import SCRIPTS, longer, make_data

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--length-scale", type=int, default=3)
    parser.add_argument("--scripts", nargs="*", default=list(SCRIPTS), choices=list(SCRIPTS))
    parser.add_argument("--run-dir", type=Path)
    args = parser.parse_args()
    folder = args.run_dir or Path(tempfile.mkdtemp(prefix="remedy-agreement-"))
    data = make_data(folder / "corpus")
    print(f"runs in {folder}; every update's gradients saved\n")
    header = "| script | rate | updates | final metric | last third's share of the drop |"
    header += "".join(f" agreement lag {lag}: first third, last third |" for lag in LAGS)
    header += f" sampled every {AGREEMENT_EVERY} (the job's): lag 1, lag 5, last third | asked |"
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    for key in args.scripts:
        script = longer(SCRIPTS[key], args.length_scale)
        for rate, factor in RATES.items():
            got = run_script(script, data, factor, folder / f"{key}-{rate.replace('/', 'over')}")
            metric = "-" if got.metric is None else f"{script.metric} {got.metric:.4g}"
            cells = [key, rate, got.updates, metric, f"{got.last_third_share:.2f}"]
            cells += [f"{a:.2f}, {b:.2f}" for a, b in got.agreement.values()]
            cells += [", ".join(f"{x:.2f}" for x in got.sampled) or "-"]
            cells += ["yes" if got.asked else "no"]
            print("| " + " | ".join(map(str, cells)) + " |", flush=True)


if __name__ == "__main__":
    main()
