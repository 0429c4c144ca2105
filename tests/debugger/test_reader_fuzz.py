"""Fuzzing the other readers (issue 13): an s3:// store on moto's real S3 server and the
legacy library's stores (tests/debugger/fixtures/legacy), mutated with a fixed seed, each
read in its own process with a deadline (tests/fuzzing.py). No read may crash, hang or read
a damaged store silently as something it is not; the counts are printed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remedy.debugger import store
from remedy.debugger.readers import legacy
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
S3_CASES = 40  # each read by the trial and by remedy check
# Each read by the trial and the evaluator; every fixture (setting of the legacy library).
LEGACY_CASES = {
    "exploding": 25,
    "healthy": 15,
    "default_mode": 10,
    "reductions": 10,
    "regex": 10,
    "workers": 10,
}
LEGACY = Path(__file__).parent / "fixtures" / "legacy"
BUCKET = "remedy-fuzz"
# Damage an S3 object can take: no FIFO, symlink or folder exists there.
NOT_ON_S3 = ("FIFO", "symlink", "folder")
STRAY_INDEX = "000000000990_worker_0.json"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3_env() -> Iterator[dict[str, str]]:
    """moto's real S3 server; the environment a reader needs to reach it."""
    import boto3
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], region_name="us-east-1",
                 aws_access_key_id="testing", aws_secret_access_key="testing",
                 ).create_bucket(Bucket=BUCKET)  # fmt: skip
    yield env
    server.stop()


def upload(root: Path, prefix: str, env: dict[str, str]) -> str:
    """Every regular file under `root` as an object under `prefix`; its s3:// URI."""
    import boto3

    client = boto3.client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    for path in fuzzing.files_under(root):
        key = f"{prefix}/{path.relative_to(root).as_posix()}"
        client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
    return f"s3://{BUCKET}/{prefix}"


def s3_mutation(rng: random.Random, root: Path) -> str:
    """One mutation of a local copy that S3 can hold: bytes, JSON, headers, layout."""
    files = [p for p in fuzzing.files_under(root)]
    family = rng.choice(["bytes", "bytes", "json", "header", "layout"])
    if family == "layout":
        steps = sorted(root.rglob("steps/*/*.safetensors"))
        one, other = rng.sample(steps, 2)
        stray = one.parent / store.step_file_name(990)
        choices: list[tuple[str, Callable[[], Any]]] = [
            ("swap two step files", lambda: swap(one, other)),
            ("a stray copy of a step file", lambda: shutil.copy(one, stray)),
            ("a step folder deleted", lambda: shutil.rmtree(one.parent)),
            ("junk beside the step files", lambda: (one.parent / "junk.txt").write_text("x")),
        ]
        label, change = rng.choice(choices)
        change()
        return label
    kind = {"json": ".json", "header": ".safetensors"}.get(family)
    path = rng.choice([f for f in files if kind is None or f.suffix == kind])
    if family == "bytes":
        label, change = rng.choice(
            [m for m in fuzzing.byte_mutations(rng, path) if not m[0].startswith(NOT_ON_S3)]
        )
    elif family == "json":
        label, change = json_mutation(rng, path)
    else:
        label, change = header_mutation(rng, path)
    change()
    return f"{path.relative_to(root)}: {label}"


def swap(one: Path, other: Path) -> None:
    a, b = one.read_bytes(), other.read_bytes()
    one.write_bytes(b)
    other.write_bytes(a)


def legacy_mutation(rng: random.Random, root: Path) -> str:
    """One mutation of a copy of a legacy store: bytes of any file (FIFOs, symlinks and
    folders included), its index and collections JSON, its layout."""
    files = fuzzing.files_under(root)
    indexes = sorted(root.glob(f"{legacy.INDEX_DIR}/*/*.json"))
    events = sorted(root.glob("events/*/*.tfevents"))
    collections = sorted(root.glob(f"{legacy.COLLECTIONS_DIR}/*_collections.json"))
    family = rng.choice(["bytes", "bytes", "json", "json", "layout"])
    if family == "bytes":
        path = rng.choice(files)
        label, change = rng.choice(fuzzing.byte_mutations(rng, path))
        change()
        return f"{path.relative_to(root)}: {label}"
    if family == "json":
        path = rng.choice([*indexes, *collections])
        label, change = json_mutation(rng, path)
        change()
        return f"{path.relative_to(root)}: {label.replace(' resealed', '')}"
    one, other = rng.sample(indexes, 2)
    event_one, event_other = rng.sample(events, 2)
    choices: list[tuple[str, Callable[[], Any]]] = [
        ("an index file deleted", lambda: one.unlink()),
        ("an event file deleted", lambda: event_one.unlink()),
        ("two index files swapped", lambda: swap(one, other)),
        ("two event files swapped", lambda: swap(event_one, event_other)),
        ("a stray index file", lambda: shutil.copy(one, one.with_name(STRAY_INDEX))),
        ("the end marker deleted", lambda: (root / legacy.END_MARKER).unlink()),
    ]  # fmt: skip
    label, change = rng.choice(choices)
    change()
    return label


def ended(copy: Path, end_file: str) -> bool:
    return os.path.lexists(copy / end_file)


def fuzz(
    tmp_path: Path,
    name: str,
    pristine: dict[str, Path],
    cases: dict[str, int],
    mutate: Callable[[random.Random, Path], str],
    runners: dict[str, list[str]],
    end_file: str,
    publish: Callable[[Path, str], str] = lambda copy, label: str(copy),
) -> fuzzing.Tally:
    """Mutate copies of each pristine store, read each with every runner, tally them
    against what the runner reads of the pristine store (with or without its end marker)."""
    rng = random.Random(SEED)
    counter = iter(range(10**6))
    baselines: dict[tuple[str, str, bool], Any] = {}
    jobs = []
    for kind, root in pristine.items():
        for has_end in (True, False):
            copy = tmp_path / f"base-{next(counter)}"
            shutil.copytree(root, copy, symlinks=True)
            if not has_end:
                (copy / end_file).unlink()
            target = publish(copy, f"base-{kind}-{has_end}")
            for runner, extra in runners.items():

                def done(
                    read: fuzzing.Read, key: Any = (kind, runner, has_end), t: Any = target
                ) -> None:  # noqa: E501
                    baselines[key] = expected_of(key[1], read, t)

                work = tmp_path / f"work-{next(counter)}"
                follow = runner == "evaluator" and not has_end
                job = fuzzing.Job(runner, target, work, extra, follow, done)
                jobs.append(job)
    fuzzing.run_jobs(jobs)

    tally = fuzzing.Tally(name)
    jobs = []
    for kind, count in cases.items():
        for index in range(count):
            copy = tmp_path / f"case-{next(counter)}"
            shutil.copytree(pristine[kind], copy, symlinks=True)
            what = mutate(random.Random(rng.randrange(2**32)), copy)
            has_end = ended(copy, end_file)
            target = publish(copy, f"case-{index}-{kind}")
            label = f"{kind} #{index} {what}"
            for runner, extra in runners.items():

                def done(
                    read: fuzzing.Read, runner: str = runner, key: Any = (kind, has_end),
                    label: str = label, target: str = target,
                ) -> None:  # fmt: skip
                    expected = baselines[(key[0], runner, key[1])]
                    outcome, why = verdict(runner, read, expected, target)
                    tally.add(outcome, label, why)

                work = tmp_path / f"work-{next(counter)}"
                follow = runner == "evaluator" and not has_end
                jobs.append(fuzzing.Job(runner, target, work, extra, follow, done))
    fuzzing.run_jobs(jobs)
    return tally


def check(tally: fuzzing.Tally, expected_cases: int) -> None:
    print()
    print(tally.report())
    adversarial.record(f"{tally.what} fuzzer", tally.counts)
    assert tally.counts["cases"] == expected_cases
    assert not tally.bad, tally.report()


def test_damaged_s3_stores_are_never_read_silently(tmp_path: Path, s3_env: dict[str, str]) -> None:
    root = tmp_path / "pristine"
    hook = every_step_hook(root, interval=2)
    train(hook, steps=5, lr=EXPLODING_LR, eval_steps=1)
    hook.close()
    env = [f"{fuzzing.ENV_PREFIX}{name}={value}" for name, value in s3_env.items()]
    runners = {"trial": env, "check": [*CHECK_ARGS, *env]}

    def publish(copy: Path, label: str) -> str:
        return upload(copy, f"fuzz/{label}", s3_env)

    tally = fuzz(
        tmp_path, "s3 store", {"s3": root}, {"s3": S3_CASES}, s3_mutation, runners,
        store.END_FILE, publish,
    )  # fmt: skip
    check(tally, S3_CASES * len(runners))


def test_damaged_legacy_stores_are_never_read_silently(tmp_path: Path) -> None:
    rules = tmp_path / "RULES.json"
    rules.write_text(json.dumps(RULES))
    runners = {"trial": [], "evaluator": ["--rules", str(rules)]}
    pristine = {kind: LEGACY / kind for kind in LEGACY_CASES}
    tally = fuzz(
        tmp_path, "legacy store", pristine, LEGACY_CASES, legacy_mutation, runners,
        legacy.END_MARKER,
    )  # fmt: skip
    check(tally, sum(LEGACY_CASES.values()) * len(runners))
