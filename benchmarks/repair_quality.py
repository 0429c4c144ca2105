"""Does remedy repair what users get wrong? Real jobs through the remediate flow, defaults
only (the recommended rules, the adaptive policy with its probes), nothing injected.

    nice python benchmarks/repair_quality.py [--cases NAME ...] [--quick] [--run-dir DIR]
                                              [--length-scale K] [--held-out]

Cases:
- seven users' scripts of ours in the style of public examples (examples/): a word-level
  LSTM LM with manual SGD and a --clip flag, which batches by hand and states its epoch
  (updates_per_epoch, its epochs flag mapped to num_epochs: asked at half) (word_lm), a
  char-level transformer on AdamW (char_transformer), a GPT-style LM with warmup and
  cosine decay to min_lr (gpt_lm), the last two with their length flag mapped to the
  max_steps role (asked at half), and a VAE that counts epochs over a DataLoader, its
  epochs flag mapped to num_epochs (vae), and a spirals classifier on Adam whose every
  setting is in a YAML file its command line names, its rate and epochs mapped as the
  file's keys (yaml_config), and a fine-tuning-style classifier on SGD with momentum
  whose rate warms up over the first 30 % of its step budget (warmup_finetune), and a
  classifier in timm's style (AdamW, a warmup epoch and a cosine decay per update through
  LambdaLR, gradient accumulation, its top-1 accuracy printed as a percentage), written
  to try remedy on, not tuned to it (accum_classifier); each at a
  learning rate 1000x and 100x too high,
  1000x and 30x too low, and without clipping (the three with a clipping flag);
- the built-in ResNet job: early (the demo: no batch norm, warmup 0.1), late (a main rate
  typed as 1.0 after a sound warmup), stalled (plain SGD at 1e-6 for 0.1), chance (ReLU without
  batch norm at 0.1);
- healthy runs of 1,000+ updates of each script at its intended settings (false alarms).

With --held-out, instead: the same faults and a healthy run of six other scripts in
examples/ that the policy was never tuned on (HELD_OUT): a terse regression on Adam under
MultiStepLR, a Trainer class on RMSprop, PyTorch's MNIST example (Adadelta, StepLR), an
Accelerate script, a notebook-style OneCycle classifier and a Hugging Face Trainer script.

With --length-scale K the scripts' fault cases and intended runs are K times as long (their
length flag; a cosine decay with it), the healthy runs and the built-in job's cases as they
are. Each fault case's yardstick is the same job at its intended settings, one launch. Printed
per case: repaired (the flow's own verdict: clean, records/verdict.py) or, for a healthy
run, false alarm; full launches, probes, total updates (probes included), the final run's
updates, total / final, and the final quality beside the intended run's. Nothing is
asserted; the README records the figures and what is not reached yet.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from remedy.cli.main import configure_prefect_environment  # noqa: E402

configure_prefect_environment()

from remedy.flows.remediate import RemediateSettings, remediate  # noqa: E402
from remedy.records.verdict import run_flaw  # noqa: E402
from remedy.state_schema import AttemptKind, Budgets, RunSpec, State  # noqa: E402
from remedy.training.demo import DEMO_RUN_SPEC  # noqa: E402

EXAMPLES = ROOT / "examples"
LAUNCHES = 8


SPIRALS_CONFIG = "configs/spirals.yaml"
SPIRALS_LR, SPIRALS_EPOCHS = f"{SPIRALS_CONFIG}:optimizer.lr", f"{SPIRALS_CONFIG}:train.epochs"


@dataclass
class Script:
    """A user's script: its folder, flags at their intended values, roles, and the metric
    that says how good the model is (lower is better)."""

    folder: str
    entry_point: str
    flags: dict[str, Any]
    roles: dict[str, str]
    metric: str
    regex: str
    steps_flag: str  # how long it trains, for the healthy long run
    long_steps: Any
    clip_off: Any  # the clip flag's value that turns clipping off (None: no such flag)
    updates_per_epoch: int | None = None  # stated, where the launcher measures no epoch
    arguments: list[str] = field(default_factory=list)  # before the flags: a config file
    takes_data: bool = True  # a flag naming the generated data
    data_flag: str = "data"  # that flag
    lower_is_better: bool = True  # of its metric
    num_classes: int | None = None
    percent: bool = False  # its metric printed as a percentage
    bare_flags: list[str] = field(default_factory=list)  # store_true switches among its flags

    def spec(self, data: Path, name: str, **changes: Any) -> dict[str, Any]:
        where = {self.data_flag: str(self.data_path(data))} if self.takes_data else {}
        flags = dict(self.flags) | where | changes
        spec: dict[str, Any] = {
            "base_job_name": name.replace("_", "-"),  # a job name: letters, digits, dashes
            "source_dir": str(EXAMPLES / self.folder),
            "entry_point": self.entry_point,
            "arguments": self.arguments,
            "hyperparameters": flags,
            "hyperparameter_roles": self.roles,
            "metric_definitions": [
                {"name": self.metric, "regex": self.regex}
                | ({"percent": True} if self.percent else {})
            ],
        }
        if self.bare_flags:
            spec["bare_flags"] = self.bare_flags
        if self.updates_per_epoch is not None:
            spec["updates_per_epoch"] = self.updates_per_epoch
        if self.num_classes is not None:
            spec["num_classes"] = self.num_classes
        return spec

    def data_path(self, data: Path) -> Path:
        files = {
            "char_transformer": "train.txt",
            "vae": "digits.npz",
            "digits": "digits.npz",
            "tabular": "tabular.csv",
        }
        return data / files[self.folder] if self.folder in files else data


SCRIPTS = {
    "word_lm": Script(  # batches by hand (no DataLoader): it states its epoch, 45 updates
        "word_lm",
        "main.py",
        {"lr": 20, "clip": 0.25, "epochs": 2},
        {"learning_rate": "lr", "grad_clip_norm": "clip", "num_epochs": "epochs"},
        "test:perplexity",
        r"test ppl ([0-9.eE+-]+)",
        "epochs",
        24,
        1e9,
        updates_per_epoch=45,
    ),
    "char_transformer": Script(
        "char_transformer",
        "train.py",
        {"learning-rate": 1e-3, "grad-clip": 1.0, "max-steps": 400},
        {"learning_rate": "learning-rate", "grad_clip_norm": "grad-clip", "max_steps": "max-steps"},
        "val:loss",
        r"final val loss ([0-9.eE+-]+)",
        "max-steps",
        1200,
        0,
    ),
    "gpt_lm": Script(
        "gpt_lm",
        "train.py",
        {
            "learning_rate": 6e-3,
            "min_lr": 6e-4,
            "grad_clip": 1.0,
            "max_iters": 400,
            "lr_decay_iters": 400,
        },
        {"learning_rate": "learning_rate", "grad_clip_norm": "grad_clip", "max_steps": "max_iters"},
        "val:loss",
        r"val loss ([0-9.eE+-]+)",
        "max_iters",
        1200,
        0,
    ),
    "vae": Script(  # counts epochs: its length from the epoch its DataLoader's pass measures
        "vae",
        "train.py",
        {"lr": 0.01, "epochs": 8},
        {"learning_rate": "lr", "output_dir": "out_dir", "num_epochs": "epochs"},
        "test:elbo_loss",
        r'"test_elbo_loss": ([0-9.eE+-]+|NaN)',
        "epochs",
        32,  # 43 updates an epoch
        None,  # clips gradient values (clip_grad_value_), no norm: no clipping role
    ),
    "yaml_config": Script(  # every setting in its YAML file: the roles are the file's keys
        "yaml_config",
        "train.py",
        {SPIRALS_LR: 0.01, SPIRALS_EPOCHS: 12},
        {"learning_rate": SPIRALS_LR, "num_epochs": SPIRALS_EPOCHS},
        "test:accuracy",
        r"test accuracy ([0-9.]+)",
        SPIRALS_EPOCHS,
        40,  # 30 updates an epoch
        None,  # no clipping
        arguments=["--config", SPIRALS_CONFIG],
        takes_data=False,  # it makes its own spirals
        lower_is_better=False,
        num_classes=3,
    ),
    "warmup_finetune": Script(  # a step budget, warmed up over its first 30 %: a long ramp
        "warmup_finetune",
        "train.py",
        {"learning-rate": 0.02, "num-train-steps": 400},
        {"learning_rate": "learning-rate", "max_steps": "num-train-steps"},
        "test:accuracy",
        r"eval_accuracy = ([0-9.]+)",
        "num-train-steps",
        1200,
        None,  # no clipping
        takes_data=False,  # it makes its own Gaussian classes
        lower_is_better=False,
        num_classes=10,
    ),
    "accum_classifier": Script(  # timm's style: AdamW, warmup + cosine per update, accumulation
        "accum_classifier",
        "train.py",
        {"lr": 1e-3, "epochs": 10},
        {"learning_rate": "lr", "num_epochs": "epochs"},
        "test:accuracy",
        r"Acc@1 ([0-9.]+)",
        "epochs",
        30,  # 32 updates an epoch (64 batches, 2 accumulated)
        None,  # no clipping
        takes_data=False,  # it makes its own Gaussian classes
        lower_is_better=False,
        num_classes=8,
        percent=True,  # Acc@1 99.414
    ),
}


# Scripts of other styles in examples/ that the policy was never tuned on (`--held-out`
# runs their cases alone): how it does on what it has not seen.
HELD_OUT = {
    "sine_regression": Script(  # a terse script: Adam, MultiStepLR, MSE, no classes
        "sine_regression",
        "fit.py",
        {"lr": 3e-3, "steps": 600},
        {"learning_rate": "lr", "max_steps": "steps"},
        "train:mse",
        r"final mse ([0-9.eE+-]+|nan)",
        "steps",
        1800,
        None,  # no clipping
        takes_data=False,  # a noisy sine of its own
    ),
    "signals": Script(  # a Trainer class, RMSprop, a 1-D CNN, 4 epochs over a DataLoader
        "signals",
        "run_training.py",
        {"learning-rate": 1e-3, "n-epochs": 4},
        {"learning_rate": "learning-rate", "num_epochs": "n-epochs"},
        "test:accuracy",  # its held-out accuracy, named as remedy judges it against chance
        r"final val_acc ([0-9.]+)",
        "n-epochs",
        20,  # 50 updates an epoch
        None,  # no clipping
        takes_data=False,  # its own synthetic waveforms
        lower_is_better=False,
        num_classes=3,
    ),
    "digits": Script(  # PyTorch's MNIST example: Adadelta under StepLR, F.nll_loss
        "digits",
        "main.py",
        {"lr": 1.0, "epochs": 6},
        {"learning_rate": "lr", "num_epochs": "epochs"},
        "test:accuracy",
        r"Accuracy: \d+/\d+ \(([0-9.]+)%\)",  # a whole percentage: 2 % is 12 of 600
        "epochs",
        24,  # 38 updates an epoch
        None,  # no clipping
        lower_is_better=False,
        num_classes=10,
        percent=True,
    ),
    "accelerate_text": Script(  # Accelerate: AdamW, warmup then linear decay, accumulation
        "accelerate_text",
        "train.py",
        {"learning_rate": 1e-3, "num_epochs": 4},
        {"learning_rate": "learning_rate", "num_epochs": "num_epochs"},
        "test:accuracy",
        r"'accuracy': ([0-9.]+)",
        "num_epochs",
        12,  # 125 updates an epoch (250 batches, two an update)
        None,  # no clipping
        takes_data=False,  # its own synthetic sentences
        lower_is_better=False,
        num_classes=4,
    ),
    "tabular": Script(  # a CSV, Adam under OneCycleLR, early stopping on the val loss
        "tabular",
        "train.py",
        {"max_lr": 3e-3, "epochs": 3},
        {"learning_rate": "max_lr", "num_epochs": "epochs", "output_dir": "out"},
        "test:accuracy",
        r'"val_acc": ([0-9.eE+-]+)',  # its held-out accuracy, named as remedy judges it
        "epochs",
        12,  # 75 updates an epoch
        None,  # no clipping
        data_flag="csv",
        lower_is_better=False,
        num_classes=4,
    ),
    "hf_trainer": Script(  # the Hugging Face Trainer: HfArgumentParser's flags, linear decay
        "hf_trainer",
        "run_classifier.py",
        {
            "max_steps": 300,
            "learning_rate": 5e-4,
            "max_grad_norm": 1.0,
            "per_device_train_batch_size": 32,
            "report_to": "none",
            "save_strategy": "no",
            "logging_steps": 50,
            "use_cpu": True,
        },
        {
            "learning_rate": "learning_rate",
            "max_steps": "max_steps",
            "output_dir": "output_dir",
            "grad_clip_norm": "max_grad_norm",
        },
        "test:accuracy",
        r'"eval_accuracy": ([0-9.]+)',
        "max_steps",
        1200,
        0.0,  # the Trainer clips only above 0
        takes_data=False,  # its own synthetic marker-token task
        lower_is_better=False,
        num_classes=2,
        bare_flags=["use_cpu"],
    ),
}


@dataclass
class Case:
    name: str
    spec: dict[str, Any]
    intended: dict[str, Any] | None  # None: a healthy run (judged for false alarms)
    metric: str
    lower_is_better: bool = True
    # False: a fault the job may train through as typed (no clipping); judged for not
    # being broken. True: a fault called clean as typed (no finding, one launch) was missed,
    # unless its quality is within QUALITY_TOLERANCE of the intended run's.
    needs_repair: bool = True


def longer(script: Script, scale: int) -> Script:
    """The script `scale` times as long (its length flag; a cosine schedule's decay with it):
    the same faults on a job nearer a real one's length, where a repair's fixed costs (the
    first run's updates before a stop, 25-update probes) weigh less."""
    if scale == 1:
        return script
    flags = dict(script.flags)
    for name in (script.steps_flag, "lr_decay_iters"):
        if name in flags:
            flags[name] = flags[name] * scale
    return replace(script, flags=flags)


def script_cases(data: Path, scale: int = 1, scripts: dict[str, Script] = SCRIPTS) -> list[Case]:
    cases = []
    for key, script in scripts.items():
        script = longer(script, scale)
        lr_flag = script.roles["learning_rate"]
        lr = script.flags[lr_flag]
        intended = script.spec(data, key)
        faults = {
            "hot1000": {lr_flag: lr * 1000},
            "hot100": {lr_flag: lr * 100},
            "cold1000": {lr_flag: lr / 1000},
            # a rate that still trains, in a line, to a loss far above the intended run's
            "cold30": {lr_flag: lr / 30},
        }
        if (clip_flag := script.roles.get("grad_clip_norm")) is not None:
            faults["noclip"] = {clip_flag: script.clip_off}
        for fault, changes in faults.items():
            # a typo in one flag: a schedule's other flags (min_lr) stay as they were
            spec = script.spec(data, f"{key}-{fault}", **changes)
            needs_repair = fault != "noclip"
            cases.append(
                Case(
                    f"{key}:{fault}",
                    spec,
                    intended,
                    script.metric,
                    lower_is_better=script.lower_is_better,
                    needs_repair=needs_repair,
                )  # fmt: skip
            )
        steps = {script.steps_flag: script.long_steps}
        if "lr_decay_iters" in script.flags:
            steps["lr_decay_iters"] = script.long_steps
        long = script.spec(data, f"{key}-long", **steps)
        cases.append(Case(f"{key}:healthy", long, None, script.metric, script.lower_is_better))
    return cases


def make_data(data: Path) -> Path:
    """The scripts' data, generated into `data` (their own generators): a word corpus
    (train.txt, valid.txt, test.txt), the VAE's digits.npz and the tabular script's CSV."""
    subprocess.run(
        [sys.executable, str(EXAMPLES / "word_lm" / "generate_corpus.py"), "--out", str(data)],
        check=True,
    )
    digits = ["--out", str(data / "digits.npz")]
    subprocess.run([sys.executable, str(EXAMPLES / "vae" / "make_digits.py"), *digits], check=True)
    table = ["--out", str(data / "tabular.csv")]
    subprocess.run(
        [sys.executable, str(EXAMPLES / "tabular" / "generate_data.py"), *table], check=True
    )
    return data


def builtin_cases(seed: int = 0) -> list[Case]:
    demo = DEMO_RUN_SPEC.model_dump(exclude={"rules"}) | {"seed": seed}
    repaired = {"add_batch_norm": 1, "warmup_learning_rate": 0.003125}
    small = {"train_samples": 2000}
    late = demo | repaired | small | {"learning_rate": 1.0, "checkpoint_every_steps": 10}
    stalled = (
        demo
        | repaired
        | small
        | {"optimizer": "sgd", "learning_rate": 1e-6, "warmup_learning_rate": 1e-6}
    )
    chance = demo | small | {"activation": "relu", "add_batch_norm": 0, "learning_rate": 0.1}
    accuracy = "test:accuracy"
    return [
        Case("builtin:early", demo, demo | repaired, accuracy, lower_is_better=False),
        Case("builtin:late", late, late | {"learning_rate": 0.1}, accuracy, False),
        Case(  # intended: the same plain SGD at the demo's rates (the typo is the rate)
            "builtin:stalled",
            stalled,
            stalled | {"learning_rate": 0.1, "warmup_learning_rate": 0.003125},
            accuracy,
            False,
        ),
        Case(  # intended: the demo's repaired job on the same data (ReLU with batch norm
            # at the chance case's rate stays near chance itself: 0.092 in 5 epochs)
            "builtin:chance",
            chance,
            demo | repaired | small,
            accuracy,
            False,
        ),
    ]


@dataclass
class Figures:
    clean: bool
    findings: int
    runs: int
    probes: int
    total: int
    final: int | None
    quality: float | None
    end: str
    strategies: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


def run(
    spec: dict[str, Any], run_dir: Path, launches: int, probe_steps: int | None = None
) -> Figures:
    probes = {} if probe_steps is None else {"probe_steps": probe_steps}
    state = State(
        run_spec=RunSpec.model_validate(spec),
        budgets=Budgets(max_num_retraining=launches, **probes),
    )
    final = remediate(
        state=state,
        run_dir=str(run_dir),
        settings=RemediateSettings(poll_interval_s=1.0, report=False),
        return_state=True,
    ).result(raise_on_failure=False)  # a run that gave up is Failed, its payload the data
    attempts = final.history.attempts
    runs = final.history.runs
    last = final.current_attempt
    clean = run_flaw(final) is None
    total = final.history.updates_spent  # a probe a run went on from: once
    final_steps = last.start_step + last.steps_run if last else None
    return Figures(
        clean=clean,
        findings=sum(len(a.findings) for a in attempts),
        runs=len(runs),
        probes=sum(a.kind is AttemptKind.probe for a in attempts),
        total=total,
        final=final_steps if clean else None,
        quality=None,
        end=final.end_reason or "",
        strategies=" > ".join(
            (a.strategy or "initial") + (f"[{a.result.kind.value}]" if a.result else "")
            for a in runs
        ),
        extra={"metrics": dict(last.metrics) if last else {}},
    )


def quality(figures: Figures, metric: str) -> float | None:
    return figures.extra["metrics"].get(metric)


# The goal for a repaired run's final quality against the intended run's.
QUALITY_TOLERANCE = 0.02


def versus_intended(case: Case, mine: float | None, theirs: float | None) -> float | None:
    """The final quality as a share of the intended run's (1.0: as good; lower: worse)."""
    if mine is None or not theirs:
        return None
    return theirs / mine if case.lower_is_better else mine / theirs


def missed(case: Case, got: Figures, versus: float | None) -> bool:
    """A fault the flow called clean as typed (one launch, no finding) while its quality
    is more than QUALITY_TOLERANCE short of the intended run's: not a repair, a miss."""
    typed_clean = got.clean and got.runs == 1 and got.findings == 0
    short = versus is None or versus < 1 - QUALITY_TOLERANCE
    return case.needs_repair and typed_clean and short


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", help="case names or prefixes (default: all)")
    parser.add_argument("--quick", action="store_true", help="one fault per kind: a smoke run")
    parser.add_argument("--run-dir", help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--max-launches", type=int, default=LAUNCHES)
    parser.add_argument(
        "--probe-steps", type=int, help="budgets.probe_steps of the faulty runs (default: its own)"
    )
    parser.add_argument(
        "--length-scale",
        type=int,
        default=1,
        help="the scripts' fault cases and intended runs this many times as long (their "
        "length flag); the built-in job's cases as they are",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="the built-in job's cases and intended runs at this seed (its spec's seed); "
        "the scripts keep their own",
    )
    parser.add_argument(
        "--held-out",
        action="store_true",
        help="the cases of the scripts the policy was never tuned on (HELD_OUT) instead",
    )
    args = parser.parse_args()
    folder = Path(args.run_dir or tempfile.mkdtemp(prefix="remedy-repair-"))
    # This machine's settings for the runs the benchmark starts in-process: they write
    # under its folder and run the example scripts (tasks/allowed_code.py).
    os.environ["REMEDY_RUNS_DIR"] = str(folder)
    os.environ["REMEDY_ALLOWED_SOURCE_DIRS"] = str(EXAMPLES)
    data = make_data(folder / "corpus")
    if args.held_out:
        cases = script_cases(data, args.length_scale, HELD_OUT)
    else:
        cases = script_cases(data, args.length_scale) + builtin_cases(args.seed)
    if args.quick:
        cases = [
            c for c in cases if c.name.endswith((":hot100", ":healthy")) or c.name == "builtin:late"
        ]
    if args.cases:
        cases = [c for c in cases if any(c.name.startswith(p) for p in args.cases)]
    started = time.monotonic()
    intended_cache: dict[str, Figures] = {}
    rows = []
    for case in cases:
        slug = case.name.replace(":", "-")
        print(f"{case.name} ...", end=" ", flush=True)
        t0 = time.monotonic()
        got = run(case.spec, folder / slug, args.max_launches, args.probe_steps)
        print(f"{time.monotonic() - t0:.0f} s: {got.strategies}; {got.end[:120]}", flush=True)
        reference = None
        if case.intended is not None:
            key = repr(sorted(case.intended.items(), key=lambda kv: kv[0]))
            if key not in intended_cache:
                print(f"  intended run of {case.name} ...", end=" ", flush=True)
                intended_cache[key] = run(case.intended, folder / f"{slug}-intended", 1)
                print("done", flush=True)
            reference = intended_cache[key]
        rows.append((case, got, reference))

    print(f"\nruns in {folder}; {time.monotonic() - started:.0f} s in all\n")
    columns = (
        "case | result | launches | probes | total updates | final updates | total / final"
        " | quality | intended | vs intended"
    )
    print(f"| {columns} |")
    print("|---" * (columns.count("|") + 1) + "|")
    repaired = alarms = faults = healthy = close = 0
    ratios = []
    for case, got, reference in rows:
        mine = quality(got, case.metric) if got.clean else None
        theirs = quality(reference, case.metric) if reference else None
        share = versus_intended(case, mine, theirs)
        ratio = got.total / got.final if got.final else None
        if case.intended is None:
            healthy += 1
            alarms += got.findings > 0 or not got.clean
            result = "false alarm" if got.findings else ("not clean" if not got.clean else "quiet")
        elif missed(case, got, share):
            faults += 1
            result = "missed: called clean as typed"
            ratio = None  # nothing was repaired: no repair's cost to count
        else:
            faults += 1
            repaired += got.clean
            close += got.clean and share is not None and share >= 1 - QUALITY_TOLERANCE
            result = "repaired" if got.clean else "not repaired"
        if ratio and case.intended is not None:
            ratios.append(ratio)
        versus = "-" if share is None else f"{share:.3f}"
        cells = [
            f"{case.name} ({case.metric})",
            result,
            got.runs,
            got.probes,
            got.total,
            got.final or "-",
            f"{ratio:.2f}x" if ratio else "-",
            "-" if mine is None else f"{mine:.4g}",
            "-" if theirs is None else f"{theirs:.4g}",
            versus,
        ]
        print("| " + " | ".join(map(str, cells)) + " |")
    overhead = f"{statistics.median(ratios):.2f}x" if ratios else "-"
    print(
        f"\nrepair rate {repaired}/{faults}; false alarms {alarms}/{healthy} healthy runs; "
        f"median total/final of the repaired {overhead}; final quality within "
        f"{QUALITY_TOLERANCE:.0%} of the intended run's: {close} of the {repaired} repaired "
        "(quality 'vs intended': 1.000 = as good as the intended run, lower = worse)"
    )


if __name__ == "__main__":
    main()
