"""Fuzzing damaged stores (issue 13): hundreds of mutations of real stores written by the
real Hook, each read by the trial, by `remedy check` and by the evaluator process.

No reader may crash, hang or read a damaged store silently as something it is not; the
counts are printed (pytest -s shows them). Fixed seed: a failure reproduces.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remedy.debugger import ReductionConfig, store
from tests import adversarial, fuzzing
from tests.debugger.helpers import EXPLODING_LR, every_step_hook, train
from tests.helpers.store_fuzz import (
    CHECK_ARGS,
    RULES,
    expected_of,
    header_mutation,
    json_mutation,
    verdict,
)

SEED = 13
CASES = {"one": 160, "workers": 40}  # mutations of each store; each read three ways

pytestmark = pytest.mark.slow  # about a minute on two busy cores


def write_stores(root: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A store of one process (losses, gradients, weights, biases with l2 norms, a
    divergence that ExplodingTensor finds, EVAL steps) and one of two workers."""
    one = root / "one"
    hook = every_step_hook(
        one, reduction_config=ReductionConfig(norms=("l2",), save_raw_tensor=True)
    )
    train(hook, steps=6, lr=EXPLODING_LR, eval_steps=2)
    hook.close()
    workers = root / "workers"
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        hook = every_step_hook(workers, interval=2)
        train(hook, steps=4, seed=rank)
        hook.close()
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    return {"one": one, "workers": workers}


# -- mutations of a store -----------------------------------------------------------------


def layout_mutations(rng: random.Random, root: Path) -> list[tuple[str, Callable[[], None]]]:
    """Damage to the store's layout rather than to one file."""
    steps = sorted(root.rglob("steps/*/*.safetensors"))
    one, other = rng.sample(steps, 2)
    step_dir = one.parent

    def swap() -> None:
        a, b = one.read_bytes(), other.read_bytes()
        one.write_bytes(b)
        other.write_bytes(a)

    def symlinked_dir() -> None:
        target = root.parent / f"elsewhere-{rng.randrange(10**6)}"
        shutil.copytree(step_dir, target)
        shutil.rmtree(step_dir)
        step_dir.symlink_to(target)

    stray = step_dir / store.step_file_name(990)
    return [
        ("swap two step files", swap),
        ("a folder named like a step file", lambda: stray.mkdir()),
        ("a FIFO named like a step file", lambda: os.mkfifo(stray)),
        ("a stray copy of a step file", lambda: shutil.copy(one, stray)),
        ("a step folder deleted", lambda: shutil.rmtree(step_dir)),
        ("a step folder as a symlink", symlinked_dir),
        (
            "a step folder as a file",
            lambda: fuzzing.replace_with(step_dir, lambda p: p.write_text("x")),
        ),
        ("junk beside the step files", lambda: (step_dir / "junk.txt").write_text("x")),
    ]


def mutations(
    rng: random.Random, pristine: Path, count: int
) -> list[tuple[str, Callable[[Path], None]]]:
    """`count` mutations of the store, each a function of a fresh copy of it."""
    files = [p.relative_to(pristine) for p in fuzzing.files_under(pristine)]
    out = []
    for index in range(count):
        seed = rng.randrange(2**32)
        family = rng.choice(["bytes", "bytes", "json", "header", "layout"])

        def apply(copy: Path, family: str = family, seed: int = seed) -> str:
            local = random.Random(seed)
            if family == "layout":
                label, change = local.choice(layout_mutations(local, copy))
                change()
                return label
            kind = {"json": ".json", "header": ".safetensors"}.get(family)
            chosen = [f for f in files if kind is None or f.suffix == kind]
            relative = local.choice(chosen)
            path = copy / relative
            if family == "bytes":
                label, change = local.choice(fuzzing.byte_mutations(local, path))
            elif family == "json":
                label, change = json_mutation(local, path)
            else:
                label, change = header_mutation(local, path)
            change()
            return f"{relative}: {label}"

        out.append((f"#{index}", apply))
    return out


# -- verdicts -------------------------------------------------------------------------------


def missing_ends(copy: Path) -> frozenset[str]:
    """The end markers the copy lacks: without one it reads as a store still being written,
    which is what the readers must then say (compared with a pristine copy lacking it)."""
    workers = copy / store.WORKERS_DIR
    tops = sorted(workers.iterdir()) if workers.is_dir() else [copy]
    missing = [top for top in tops if not os.path.lexists(top / store.END_FILE)]
    return frozenset(str(top.relative_to(copy)) for top in missing)


# -- the test -------------------------------------------------------------------------------


def test_damaged_stores_are_never_read_silently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pristine = write_stores(tmp_path / "pristine", monkeypatch)
    rules = tmp_path / "RULES.json"
    rules.write_text(json.dumps(RULES))
    extra = {"trial": [], "check": CHECK_ARGS, "evaluator": ["--rules", str(rules)]}
    rng = random.Random(SEED)
    counter = iter(range(10**6))

    # What the readers say of each store, whole, and with end markers missing (a store
    # still being written): computed on demand, on a pristine copy with those removed.
    baselines: dict[tuple[str, str, frozenset[str]], Any] = {}

    def baseline_jobs(kind: str, missing: frozenset[str]) -> list[fuzzing.Job]:
        copy = tmp_path / f"base-{next(counter)}"
        shutil.copytree(pristine[kind], copy, symlinks=True)
        for top in missing:
            (copy / top / store.END_FILE).unlink()
        jobs = []
        for runner in ("trial", "check", "evaluator"):

            def done(read: fuzzing.Read, runner: str = runner, copy: Path = copy) -> None:
                baselines[(kind, runner, missing)] = expected_of(runner, read, copy)

            work = tmp_path / f"work-{next(counter)}"
            jobs.append(fuzzing.Job(runner, copy, work, extra[runner], bool(missing), done))
        return jobs

    cases: list[tuple[str, str, Path, frozenset[str]]] = []
    for kind, count in CASES.items():
        for label, apply in mutations(rng, pristine[kind], count):
            copy = tmp_path / f"case-{next(counter)}"
            shutil.copytree(pristine[kind], copy, symlinks=True)
            what = apply(copy)
            cases.append((kind, f"{kind} {label} {what}", copy, missing_ends(copy)))

    needed = {(kind, missing) for kind, _, _, missing in cases} | {
        (kind, frozenset()) for kind in CASES
    }
    fuzzing.run_jobs([job for key in sorted(needed, key=str) for job in baseline_jobs(*key)])

    tallies = {runner: fuzzing.Tally(runner) for runner in ("trial", "check", "evaluator")}
    jobs = []
    for kind, label, copy, missing in cases:
        for runner in ("trial", "check", "evaluator"):

            def done(
                read: fuzzing.Read, runner: str = runner, kind: str = kind, copy: Path = copy,
                missing: frozenset[str] = missing, label: str = label,
            ) -> None:  # fmt: skip
                expected = baselines[(kind, runner, missing)]
                outcome, why = verdict(runner, read, expected, copy)
                tallies[runner].add(outcome, label, why)

            work = tmp_path / f"work-{next(counter)}"
            follow = runner == "evaluator" and bool(missing)
            jobs.append(fuzzing.Job(runner, copy, work, extra[runner], follow, done))
    fuzzing.run_jobs(jobs)

    total = fuzzing.Tally("all readers")
    for tally in tallies.values():
        total.counts.update(tally.counts)
        total.bad.extend(f"{tally.what}: {line}" for line in tally.bad)
    print()
    for tally in tallies.values():
        print(tally.report().splitlines()[0])
    print(total.report())
    adversarial.record("store fuzzer", total.counts)
    assert total.counts["cases"] == 3 * sum(CASES.values())
    assert not total.bad, total.report()
