"""Compute spent by the `seed` and `adaptive` policies to reach a clean run, on real jobs.

    python benchmarks/policy_comparison.py [--scenario early|late] [--policies seed adaptive]

Runs the remediate flow on one ELU ResNet-20 scenario once per policy with the same seed,
then prints for each:
attempts, total training steps consumed until a clean completed run, steps of that final
run, the ratio total/final (the compute overhead of remediation; the published prior art
reports about 1.19x in time), final test accuracy and wall time. Steps are optimizer
updates; samples (steps x batch size) are printed too, since a strategy may change the
batch size. Nothing is asserted: the figures are printed.

Scenarios (both real dynamics, nothing injected):
- early: the demo (training/demo.py): no batch norm, warmup 0.1. Every rung the ladder
  tries explodes within 5 updates, so failed attempts are nearly free and the final run
  dominates: no policy can spend less than that final run (395 steps) against the seed's
  ~440, a floor of ~0.9 on the ratio.
- late: the demo's repaired spec (batch norm, warmup 0.003125) with the main learning rate
  typed as 1.0 instead of 0.1. The warmup epoch trains and is checkpointed; the gradients
  overflow six updates after the main rate starts (update 85). This is the expensive case
  ("it explodes after hours"): every from-scratch retry repeats the warmup epoch. Beside
  ExplodingTensor it runs DivergingLoss: at learning rates 0.5-0.7 the loss climbs to 1e10
  and stays finite, and without that rule such a run "completes" at chance accuracy.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from remedy.cli import configure_prefect_environment  # noqa: E402

configure_prefect_environment()

from remedy.flows.remediate import RemediateSettings, remediate  # noqa: E402
from remedy.state_schema import JobStatus, RuleSpec, RunSpec, State, exploding_tensor_rule  # noqa: E402
from remedy.training.demo import DEMO_RUN_SPEC  # noqa: E402

SCENARIOS: dict[str, dict[str, object]] = {
    "early": DEMO_RUN_SPEC.model_dump(),
    "late": DEMO_RUN_SPEC.model_dump()
    | {
        "add_batch_norm": 1,
        "warmup_learning_rate": 0.003125,
        "learning_rate": 1.0,
        "rules": [exploding_tensor_rule(), RuleSpec(name="DivergingLoss", rule="DivergingLoss")],
    },
}


def figures(final: State, wall_s: float) -> dict[str, object]:
    attempts = final.history.attempts
    last = attempts[-1]
    clean = last.outcome is JobStatus.Completed and not last.findings
    total = sum(a.steps_run for a in attempts)
    return {
        "attempts": len(attempts),
        "clean run reached": "yes" if clean else "no",
        "total steps": total,
        "final run steps": last.steps_run,
        "total / final": f"{total / last.steps_run:.2f}x" if last.steps_run else "-",
        "total samples": sum(a.steps_run * a.spec.batch_size for a in attempts),
        "final accuracy": f"{last.final_accuracy:.3f}" if last.final_accuracy else "-",
        "wall time (s)": f"{wall_s:.0f}",
        "strategies": " > ".join(a.strategy or "initial" for a in attempts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), default="early")
    parser.add_argument("--policies", nargs="+", default=["seed", "adaptive"])
    parser.add_argument("--seed", type=int, default=0, help="training seed (same for all)")
    parser.add_argument("--run-dir", help="keep the runs here (default: a temporary folder)")
    args = parser.parse_args()
    workdir = Path(args.run_dir or tempfile.mkdtemp(prefix="remedy-policies-"))
    rows: dict[str, dict[str, object]] = {}
    for policy in args.policies:
        spec = RunSpec(**(SCENARIOS[args.scenario] | {"seed": args.seed}))
        run_dir = workdir / policy.replace(":", "-")
        print(
            f"running the {args.scenario} scenario under policy {policy!r} in {run_dir} ...",
            flush=True,
        )
        started = time.monotonic()
        final = remediate(
            state=State(run_spec=spec, policy=policy),
            run_dir=str(run_dir),
            settings=RemediateSettings(poll_interval_s=1.0),
        )
        rows[policy] = figures(final, time.monotonic() - started)

    print(f"\npolicies on the {args.scenario} scenario (seed {args.seed}); runs in {workdir}")
    print(f"{'':22}" + "".join(f"{p:>18}" for p in rows))
    for key in next(iter(rows.values())):
        if key == "strategies":
            continue
        print(f"{key:22}" + "".join(f"{str(r[key]):>18}" for r in rows.values()))
    for policy, row in rows.items():
        print(f"{policy}: {row['strategies']}")
    if {"seed", "adaptive"} <= set(rows):
        ratio = int(rows["adaptive"]["total steps"]) / int(rows["seed"]["total steps"])
        print(f"adaptive / seed total steps: {ratio:.2f} (target: <= 0.50)")


if __name__ == "__main__":
    main()
