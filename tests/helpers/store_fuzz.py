"""Mutations of a real tensor store and the verdict on each reader's answer to one."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remedy.debugger import store
from tests import fuzzing

RULES = [
    {"name": "Explodes", "rule": "ExplodingTensor", "parameters": {}, "actions": []},
    {"name": "Vanishes", "rule": "VanishingGradient", "parameters": {}, "actions": []},
]


CHECK_ARGS = ["--rule", "ExplodingTensor", "--rule", "VanishingGradient"]


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
        if reseal and isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values()):
            entries = {k: v for k, v in header.items() if k != "__metadata__"}
            text = store.encode_header(meta, entries)
        else:
            text = json.dumps(header, separators=(",", ":")).encode()
            text += b" " * (-len(text) % 8)
        path.write_bytes(len(text).to_bytes(8, "little") + text + data)

    return f"header set {str(value)[:20]!r} at {list(where)}{' resealed' if reseal else ''}", apply


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
