"""Fuzzing damaged repro bundles (issue 13): mutations of a real bundle, written by the real
NaN guard on a real divergence, each replayed in-process (training.replay.replay) and by
`remedy repro --json`, in processes of their own with a deadline.

No reader may crash, hang or replay a damaged bundle as if it were whole; the counts are
printed (pytest -s shows them). Fixed seed: a failure reproduces.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remedy.state_schema import Hyperparameters
from remedy.training.bundle import META_FILE, write_manifest
from remedy.training.train import train
from tests import adversarial, fuzzing
from tests.helpers.builtin_job import UNSTABLE

SEED = 13
CASES = 80
RUNNERS = ("replay", "repro")

pytestmark = pytest.mark.slow  # one to two minutes on two busy cores (a real job first)


def write_bundle(out: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The bundle the NaN guard writes when an unstable learning rate diverges."""
    for name in ("REMEDY_STOP_FILE", "REMEDY_DEBUGGER_CONFIG", "REMEDY_RULE_STATUS_DIR"):
        monkeypatch.delenv(name, raising=False)
    result = train(Hyperparameters.model_validate(UNSTABLE), out)
    assert result["status"] == "Stopped"
    (bundle,) = sorted((out / "repro").iterdir())
    return bundle


def reseal(bundle: Path, changed: str | None = None) -> None:
    """What a writer with a bug would leave: the damage under valid checksums."""
    import hashlib

    meta = json.loads((bundle / META_FILE).read_text())
    if changed is not None and isinstance(meta.get("sha256"), dict):
        meta["sha256"][changed] = hashlib.sha256((bundle / changed).read_bytes()).hexdigest()
    write_manifest(bundle, meta)


def json_mutation(
    rng: random.Random, bundle: Path, relative: str
) -> tuple[str, Callable[[], None]]:
    path = bundle / relative
    data = json.loads(path.read_text())
    where = rng.choice(list(fuzzing.json_paths(data)))
    if relative == META_FILE and rng.random() < 0.5:  # aim at the model's size
        key = rng.choice(sorted(data["hyperparameters"]))
        where = ("hyperparameters", key)
    delete = rng.random() < 0.2
    value = rng.choice([*fuzzing.HOSTILE, 1024, 200, 10_000_000])
    sealed = rng.random() < 0.6

    def apply() -> None:
        fuzzing.set_path(data, where, value, delete)
        path.write_text(json.dumps(data))
        if sealed:
            reseal(bundle, None if relative == META_FILE else relative)

    what = "delete" if delete else f"set {str(value)[:20]!r}"
    return f"{relative}: JSON {what} at {list(where)}{' resealed' if sealed else ''}", apply


def mutations(rng: random.Random, pristine: Path) -> list[Callable[[Path], str]]:
    files = [str(p.relative_to(pristine)) for p in fuzzing.files_under(pristine)]
    out = []
    for _ in range(CASES):
        seed = rng.randrange(2**32)

        def apply(copy: Path, seed: int = seed) -> str:
            local = random.Random(seed)
            family = local.choice(["bytes", "bytes", "json", "json", "layout"])
            if family == "json":
                relative = local.choice([META_FILE, "state/checkpoint.json"])
                label, change = json_mutation(local, copy, relative)
            elif family == "layout":
                state = copy / "state"
                elsewhere = copy.parent / f"{copy.name}-state"
                layouts = [
                    ("state folder deleted", lambda: shutil.rmtree(state)),
                    ("state folder symlinked", lambda: _move_and_link(state, elsewhere)),
                    ("state folder a FIFO", lambda: fuzzing.replace_with(state, _fifo)),
                    ("bundle folder a file", lambda: fuzzing.replace_with(copy, Path.touch)),
                ]
                label, change = local.choice(layouts)
            else:
                relative = local.choice(files)
                label, change = local.choice(fuzzing.byte_mutations(local, copy / relative))
                label = f"{relative}: {label}"
            change()
            return label

        out.append(apply)
    return out


def _fifo(path: Path) -> None:
    import os

    os.mkfifo(path)


def _move_and_link(folder: Path, elsewhere: Path) -> None:
    shutil.move(folder, elsewhere)
    folder.symlink_to(elsewhere)


def normal(result: Any, target: Path) -> Any:
    return json.loads(json.dumps(result).replace(str(target), "<BUNDLE>"))


def outcome(runner: str, read: fuzzing.Read, target: Path) -> tuple[str, Any]:
    """("read", the replay's result) or ("error", message) or ("crashed"/"hung", why)."""
    if read.hung:
        return "hung", "no exit"
    if "Traceback" in read.stderr:
        return "crashed", read.stderr.strip().splitlines()[-1][:300]
    if runner == "replay":
        if read.exit != 0 or read.result is None:
            return "crashed", f"exit {read.exit}"
        if "error" in read.result:
            return "error", read.result["error"]
        return "read", normal(read.result["read"], target)
    if read.exit == 2:
        return "error", read.stderr.strip()
    if read.exit in (0, 1):
        try:
            return "read", normal(json.loads(read.stdout), target)
        except ValueError:
            return "crashed", f"exit {read.exit} without a result: {read.stdout[-200:]}"
    return "crashed", f"exit {read.exit}: {read.stderr[-300:]}"


def test_damaged_bundles_are_never_replayed_silently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pristine = write_bundle(tmp_path / "job", monkeypatch)
    counter = iter(range(10**6))
    expected: dict[str, Any] = {}

    def job(runner: str, copy: Path, done: Callable[[fuzzing.Read], None]) -> fuzzing.Job:
        return fuzzing.Job(runner, copy, tmp_path / f"work-{next(counter)}", [], False, done)

    base = tmp_path / "base" / "bundle"
    shutil.copytree(pristine, base)
    jobs = []
    for runner in RUNNERS:

        def remember(read: fuzzing.Read, runner: str = runner) -> None:
            kind, value = outcome(runner, read, base)
            assert kind == "read", value
            expected[runner] = value

        jobs.append(job(runner, base, remember))
    fuzzing.run_jobs(jobs)
    assert expected["replay"]["reproduced"] and expected["replay"] == expected["repro"]

    tallies = {runner: fuzzing.Tally(runner) for runner in RUNNERS}
    jobs = []
    for index, apply in enumerate(mutations(random.Random(SEED), pristine)):
        # Each copy in a folder of its own: a mutation may put things beside the bundle.
        copy = tmp_path / f"case-{index}" / "bundle"
        shutil.copytree(pristine, copy)
        label = f"#{index} {apply(copy)}"
        for runner in RUNNERS:

            def done(
                read: fuzzing.Read, runner: str = runner, copy: Path = copy, label: str = label
            ) -> None:
                kind, value = outcome(runner, read, copy)
                if kind == "error":  # a clear error names the bundle's file
                    verdict = "handled cleanly" if str(copy) in value else "silently wrong"
                elif kind == "read":
                    same = value == expected[runner]
                    verdict = "handled cleanly" if same else "silently wrong"
                    value = "replayed differently"
                else:
                    verdict = kind
                tallies[runner].add(verdict, label, str(value)[:300])

            jobs.append(job(runner, copy, done))
    fuzzing.run_jobs(jobs)

    total = fuzzing.Tally("all readers")
    for tally in tallies.values():
        total.counts.update(tally.counts)
        total.bad.extend(f"{tally.what}: {line}" for line in tally.bad)
    print()
    for tally in tallies.values():
        print(tally.report().splitlines()[0])
    print(total.report())
    adversarial.record("bundle fuzzer", total.counts)
    assert total.counts["cases"] == len(RUNNERS) * CASES
    assert not total.bad, total.report()
