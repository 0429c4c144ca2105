"""Would the verdict's questions at an eighth, a quarter and half have stopped these launches?

    python benchmarks/repair_quality.py --run-dir DIR      # keeps every case's run folder
    python benchmarks/early_questions.py DIR

A launch of known length is asked at an eighth, a quarter and half of it whether its model
has begun to learn (records/asked_early.py): its loss must be that share of the end's 10 %
below the untrained model's, and before half only a launch whose gradients still agree or
whose rates are known (and whose schedule is not raising the rate) is stopped. A run
stopped at one point does not show what the later ones would have said. This replays them
on the first launch of every case the run kept, from that launch's own step records cut at
each point of its length (its max_iters; its epochs times the epoch its job measured; else
its steps when it ran to its end): for each, the loss's drop below its start, the gradient
agreement and the rate's thirds the question reads, and the finding it gives ("-": none);
at a quarter and half, as a job held there is asked, a model that learned while its
gradients still agree too (StillDescending; at a quarter 0.5 or more at both lags). The
healthy and intended runs must get none; the runs that learned nothing, or too slowly,
one. Prints figures; asserts nothing. The README ("Not reached yet", the asking-sooner
paragraph) and docs/policies.md record them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from remedy.records.asked_early import asked_early  # noqa: E402
from remedy.state_schema import RunSpec, State  # noqa: E402
from remedy.state_schema.asking_points import ASKED_AT, asking_point  # noqa: E402
from remedy.state_schema.loss_windows import LOSS_WINDOW, windowed_losses  # noqa: E402
from remedy.state_schema.transitions import begin_attempt, update_current_attempt  # noqa: E402
from remedy.strategies.outcomes import descent_figures, step_losses  # noqa: E402


def first_launch(case: Path) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The case's first attempt (from state.json) and its job's step records."""
    state_file = case / "state.json"
    if not state_file.exists():
        return None
    attempt = json.loads(state_file.read_text())["state"]["history"]["attempts"][0]
    metrics = case / "jobs" / attempt["job_name"] / "metrics.jsonl"
    if not metrics.exists():
        return None
    lines = metrics.read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    return attempt, [r for r in records if r.get("type") == "step"]


def known_length(case: Path, attempt: dict[str, Any]) -> int | None:
    """The launch's length as the monitor knew it: the flag its max_steps role maps, or its
    num_epochs role times the epoch its job measured (progress.json's steps_per_epoch),
    else its steps when it ran to its end (the built-in job reports its own)."""
    progress = case / "jobs" / attempt["job_name"] / "progress.json"
    measured = (
        json.loads(progress.read_text()).get("steps_per_epoch") if progress.exists() else None
    )
    stated = RunSpec.model_validate(attempt["spec"]).known_length(measured)
    if stated is not None:
        return stated
    return int(attempt["steps_run"]) if attempt["outcome"] == "Completed" else None


def asked_at(
    steps: list[dict[str, Any]], length: int, share: float, spec: dict[str, Any]
) -> list[str] | None:
    """The question at `share` of `length`, replayed on the first steps of a launch of
    `spec` (its typed rate is read): its figures and finding, as table cells; None when
    the launch did not run that far."""
    upto = asking_point(length, share)
    if upto > len(steps) or upto == 0:
        return None
    part = steps[:upto]
    losses = [x for x in step_losses(part) if x is not None]
    if not losses:
        return None
    windows = windowed_losses(upto, losses[:LOSS_WINDOW], losses[-LOSS_WINDOW:])
    fields: dict[str, Any] = {"steps_run": upto, "start_step": 0, "initial_loss": losses[0]}
    if windows:
        first, last, size = windows
        fields |= {"initial_window_loss": first, "final_window_loss": last, "loss_window": size}
    state = begin_attempt(State(run_spec=RunSpec.model_validate(spec)), "replay")
    state = update_current_attempt(state, **fields)
    descent = descent_figures(part)
    # held, as the local backend holds a cold start of known length at each point: whether
    # a model that learned learns too slowly, too (StillDescending), at a quarter and half
    found = asked_early(state, length, lambda a: a.model_copy(update=descent), held=True)
    start = min(losses[0], windows[0]) if windows else losses[0]
    drop = f"{(1 - windows[1] / start) * 100:.1f} %" if windows else "-"
    agreement = ", ".join(f"{x:.2f}" for x in descent["gradient_agreement"]) or "-"
    rates = " -> ".join(f"{x:.2g}" for x in descent["rate_thirds"]) or "-"
    return [drop, agreement, rates, found.rule if found else "-"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path, help="a repair_quality.py --run-dir folder")
    args = parser.parse_args(argv)
    table = Table(title=f"the verdict's early questions, replayed on {args.run_dir}")
    table.add_column("case")
    table.add_column("length", justify="right")
    for share in ASKED_AT:
        for what in ("drop", "agreement", "rate thirds", "finding"):
            table.add_column(f"{share:g}: {what}", justify="right")
    for case in sorted(p for p in args.run_dir.iterdir() if p.is_dir()):
        if (launch := first_launch(case)) is None:
            continue
        attempt, steps = launch
        length = known_length(case, attempt)
        cells = [case.name, str(length or "-")]
        for share in ASKED_AT:
            asked = asked_at(steps, length, share, attempt["spec"]) if length else None
            cells += asked or ["-"] * 4
        table.add_row(*cells)
    Console(width=220).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
