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

SEED = 13
CASES = {"one": 160, "workers": 40}  # mutations of each store; each read three ways
RULES = [
    {"name": "Explodes", "rule": "ExplodingTensor", "parameters": {}, "actions": []},
    {"name": "Vanishes", "rule": "VanishingGradient", "parameters": {}, "actions": []},
]
CHECK_ARGS = ["--rule", "ExplodingTensor", "--rule", "VanishingGradient"]

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


def reseal_json(path: Path, data: Any) -> Any:
    """What a writer with a bug would write: the damaged content under a valid checksum."""
    if not isinstance(data, dict):
        return data
    if path.name == store.COLLECTIONS_FILE:
        return {
            name: store.with_crc({k: v for k, v in entry.items() if k != store.CRC_KEY}, name=name)
            if isinstance(entry, dict)
            else entry
            for name, entry in data.items()
        }
    return store.with_crc({k: v for k, v in data.items() if k != store.CRC_KEY})


def json_mutation(rng: random.Random, path: Path) -> tuple[str, Callable[[], None]]:
    data = json.loads(path.read_text())
    paths = list(fuzzing.json_paths(data))
    where = rng.choice(paths)
    delete = rng.random() < 0.25
    value = rng.choice(fuzzing.HOSTILE)
    reseal = rng.random() < 0.5

    def apply() -> None:
        fuzzing.set_path(data, where, value, delete)
        out = reseal_json(path, data) if reseal else data
        path.write_text(json.dumps(out))

    what = "delete" if delete else f"set {str(value)[:20]!r}"
    return f"JSON {what} at {list(where)}{' resealed' if reseal else ''}", apply


def header_mutation(rng: random.Random, path: Path) -> tuple[str, Callable[[], None]]:
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    data = raw[8 + size :]
    paths = list(fuzzing.json_paths(header))
    where = rng.choice(paths)
    value = rng.choice([*fuzzing.HOSTILE, [10**9, 10**9], [0, 10**12], "F64", "I32", "EVAL", "7"])
    reseal = rng.random() < 0.5

    def apply() -> None:
        fuzzing.set_path(header, where, value)
        meta = header.get("__metadata__")
        if reseal and isinstance(meta, dict):
            entries = {k: v for k, v in header.items() if k != "__metadata__"}
            meta[store.HEADER_CRC_KEY] = store.header_crc32(meta, entries)
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * (-len(text) % 8)
        path.write_bytes(len(text).to_bytes(8, "little") + text + data)

    return f"header set {str(value)[:20]!r} at {list(where)}{' resealed' if reseal else ''}", apply


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


def normal_statuses(read: fuzzing.Read, target: Path | str) -> Any:
    if read.statuses is None:
        return None
    keep = ("RuleEvaluationStatus", "StatusDetails", "step", "mode", "tensor", "steps_evaluated")
    return {
        name: {k: str(record.get(k)).replace(str(target), "<STORE>") for k in keep}
        for name, record in read.statuses.items()
    }


def names_the_copy(text: str, target: Path | str) -> bool:
    return str(target) in text


def verdict(runner: str, read: fuzzing.Read, expected: Any, target: Path | str) -> tuple[str, str]:
    if read.hung:
        return "hung", "no exit"
    if "Traceback" in read.stderr:
        return "crashed", read.stderr.strip().splitlines()[-1][:300]
    if runner == "trial":
        if read.exit != 0 or read.result is None:
            return "crashed", f"exit {read.exit}"
        if "error" in read.result:
            ok = names_the_copy(read.result["error"], target)
            return ("handled cleanly", "") if ok else ("silently wrong", read.result["error"])
        same = read.result["read"] == expected
        return ("handled cleanly", "") if same else ("silently wrong", "reads differently")
    # remedy check (0, 1; 2 = refused with one line) and the evaluator (0, 1)
    allowed = {0, 1, 2} if runner == "check" else {0, 1}
    if read.exit not in allowed:
        return "crashed", f"exit {read.exit}: {read.stderr[-300:]}"
    if runner == "check" and read.exit == 2:
        ok = names_the_copy(read.stderr, target)
        return ("handled cleanly", "") if ok else ("silently wrong", read.stderr[-300:])
    statuses = normal_statuses(read, target)
    if not statuses or len(statuses) != len(RULES):
        return "crashed", f"statuses {sorted(statuses or {})}, exit {read.exit}"
    errors = [r for r in read.statuses.values() if r["RuleEvaluationStatus"] == "Error"]
    if errors and all(names_the_copy(r["StatusDetails"], target) for r in errors):
        return "handled cleanly", ""
    if statuses == expected:
        return "handled cleanly", ""
    return "silently wrong", json.dumps(statuses)[:400]


def expected_of(runner: str, read: fuzzing.Read, target: Path | str) -> Any:
    if runner == "trial":
        assert read.result is not None and "read" in read.result, read.stderr
        return read.result["read"]
    assert read.exit == 0 or runner == "check", read.stderr
    return normal_statuses(read, target)


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
