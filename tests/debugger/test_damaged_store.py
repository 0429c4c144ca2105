"""Damaged stores are reported, naming the file, never read silently (issue 13)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from remedy.debugger import CorruptStepFile, create_trial, store
from remedy.debugger.exceptions import CorruptStoreFile, IncompleteStore
from tests.debugger.helpers import (
    REPO,
    every_step_hook,
    new_store,
    one_file_per_step,
    train,
    write_pack,
    write_step,
)

pytestmark = pytest.mark.adversarial("damaged stores", fails_as="silently wrong")


@pytest.fixture
def ended(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    one_file_per_step(monkeypatch)
    root = tmp_path / "store"
    hook = every_step_hook(root)
    train(hook, steps=5)
    hook.close()
    return root


def step_file(root: Path, step: int) -> Path:
    return store.step_path(root, store.ModeKeys.TRAIN, step)


def test_a_missing_step_file_is_named(ended: Path) -> None:
    step_file(ended, 3).unlink()
    with pytest.raises(IncompleteStore, match=r"end\.json: names 1 TRAIN step.*: 3$"):
        create_trial(ended)


def test_a_flipped_data_byte_fails_its_checksum(ended: Path) -> None:
    path = step_file(ended, 2)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x10  # the last tensor's last byte
    path.write_bytes(bytes(data))
    trial = create_trial(ended)  # the header is intact
    names = trial.step_header(2).tensor_names
    with pytest.raises(CorruptStepFile, match=f"{path}: tensor .* fails its checksum"):
        for name in names:
            trial.tensor(name.split("::")[0]).value(2)


def test_a_changed_header_byte_fails_the_header_checksum(ended: Path) -> None:
    """A shape's two sizes swapped still parses and fills its bytes: only the checksum
    of the header's bytes as written tells."""
    path = step_file(ended, 2)
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    name = next(k for k, v in header.items() if k != "__metadata__" and len(v["shape"]) == 2)
    rows, cols = header[name]["shape"]
    assert rows != cols
    was = f'"{name}":{{"dtype":"F32","shape":[{rows},{cols}]'.encode()
    assert raw.count(was) == 1
    path.write_bytes(raw.replace(was, f'"{name}":{{"dtype":"F32","shape":[{cols},{rows}]'.encode()))
    with pytest.raises(
        CorruptStepFile, match=f"{path}: not a debugger step file .*header checksum"
    ):
        create_trial(ended)


def test_a_header_sealed_before_the_byte_checksum_is_still_checked(tmp_path: Path) -> None:
    """Step files written before 2026-11-26 carry the crc32 of the header's canonical JSON
    (header_crc32): they read as before, and a change to them is still caught."""
    new_store(tmp_path)
    write_step(tmp_path, 0, {"w": np.arange(6, dtype=np.float32).reshape(2, 3)})
    path = step_file(tmp_path, 0)
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    meta = header.pop("__metadata__")
    del meta[store.HEADER_CRC_KEY]
    meta[store.CANONICAL_HEADER_CRC_KEY] = store.canonical_header_crc32(meta, header)

    def write(entries: dict[str, object]) -> None:
        text = store.encode_header(meta, entries, checksum=False)
        assert b"header_crc32" in text and store.HEADER_CRC_KEY.encode() not in text
        path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + size :])

    write(header)
    assert create_trial(tmp_path).tensor("w").value(0).tolist() == [[0, 1, 2], [3, 4, 5]]
    write({"w": header["w"] | {"shape": [3, 2]}})
    with pytest.raises(CorruptStepFile, match="header checksum mismatch"):
        create_trial(tmp_path)


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "folder", "symlink_out"])
def test_only_regular_files_are_opened(ended: Path, kind: str) -> None:
    path = step_file(ended, 4)
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)  # opening it for reading would wait for a writer for ever
    elif kind == "dev_zero":
        path.symlink_to("/dev/zero")
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to(step_file(ended, 3))  # even one that leads to a valid step file
    with pytest.raises(CorruptStepFile, match=str(path)):
        create_trial(ended)


@pytest.mark.parametrize("content", ["", "[]", '"x"', "{", "[" * 100_000])
def test_meta_collections_and_end_must_be_json_objects(ended: Path, content: str) -> None:
    for name in (store.META_FILE, store.COLLECTIONS_FILE, store.END_FILE):
        original = (ended / name).read_text()
        (ended / name).write_text(content)
        with pytest.raises(CorruptStoreFile, match=name):
            create_trial(ended)
        (ended / name).write_text(original)


def test_an_absurd_shape_is_refused_before_allocating(tmp_path: Path) -> None:
    new_store(tmp_path)
    write_step(tmp_path, 0, {"w": np.ones(4, dtype=np.float32)})
    path = step_file(tmp_path, 0)
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + size])
    header["w"]["shape"] = [10**9, 10**9]  # 4 EB if it were allocated
    text = store.encode_header(header["__metadata__"], {"w": header["w"]})  # even sealed
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + size :])
    with pytest.raises(CorruptStepFile, match=r"does not fill bytes"):
        create_trial(tmp_path)


def test_a_tensor_named_twice_in_a_header_is_refused(tmp_path: Path) -> None:
    new_store(tmp_path)
    write_step(tmp_path, 0, {"w": np.ones(4, dtype=np.float32)})
    path = step_file(tmp_path, 0)
    raw = path.read_bytes()
    size = int.from_bytes(raw[:8], "little")
    text = raw[8 : 8 + size].rstrip()
    entry = json.dumps({"w": json.loads(text)["w"]})[1:-1].encode()
    text = text[:-1] + b"," + entry + b"}"  # the same entry again: JSON keeps the last one
    text += b" " * (-len(text) % 8)
    text = store.seal_header(text)  # even sealed
    path.write_bytes(len(text).to_bytes(8, "little") + text + raw[8 + size :])
    with pytest.raises(CorruptStepFile, match="a key appears twice"):
        create_trial(tmp_path)


def test_a_store_without_checksums_still_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "WRITE_CHECKSUMS", False)
    new_store(tmp_path)
    write_step(tmp_path, 0, {"loss": np.array(2.5)})
    store.write_end(tmp_path, {store.ModeKeys.TRAIN: 0}, 0)  # no saved_steps: as before
    header = store.parse_header(step_file(tmp_path, 0).read_bytes()[8:].split(b"}}", 1)[0] + b"}}")
    assert store.CRC_KEY not in header[0]
    assert float(create_trial(tmp_path).tensor("loss").value(0)) == 2.5


def test_the_evaluator_writes_error_statuses_naming_the_damage(ended: Path, tmp_path: Path) -> None:
    os.mkfifo(step_file(ended, 4).with_name(store.step_file_name(7)))
    rules = tmp_path / "RULES.json"
    rules.write_text(json.dumps([{"name": "Explodes", "rule": "ExplodingTensor"}]))
    status_dir = tmp_path / "status"
    done = subprocess.run(
        [sys.executable, "-m", "remedy.debugger.evaluator", "--trial", str(ended),
         "--rules", str(rules), "--status-dir", str(status_dir), "--poll-interval", "0.05"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr
    status = json.loads((status_dir / "Explodes.json").read_text())
    assert status["RuleEvaluationStatus"] == "Error"
    assert "000000000007.safetensors: a FIFO" in status["StatusDetails"]


def test_damage_found_while_following_comes_after_the_steps_before_it(tmp_path: Path) -> None:
    from remedy.debugger.evaluator import RuleEvaluator
    from remedy.debugger.rule_config import RuleConfig

    root = new_store(tmp_path / "store")
    write_step(root, 0, {"loss": np.array(1.0)})
    evaluator = RuleEvaluator(
        create_trial(root), [RuleConfig(name="Loss", rule="LossNotDecreasing")],
        tmp_path / "status", log=lambda line: None,
    )  # fmt: skip
    evaluator.start()
    assert not evaluator.poll()
    write_step(root, 1, {"loss": np.array(0.9)})
    step_file(root, 2).write_bytes(b"\0" * 64)  # a damaged step 2
    assert evaluator.poll()  # over: the store is damaged
    record = evaluator.statuses["Loss"]
    assert record.status.value == "Error" and record.steps_evaluated == 2
    assert f"{step_file(root, 2)}: " in record.details


def test_saved_steps_are_recorded_as_ranges_that_expand_to_them() -> None:
    import random

    rng = random.Random(0)
    for _ in range(500):
        steps = sorted(rng.sample(range(200), rng.randint(0, 30)))
        ranges = store.step_ranges(steps)
        assert [s for r in ranges for s in range(*r)] == steps
    assert store.step_ranges(list(range(0, 10_000, 10))) == [[0, 9991, 10]]  # one, however long


def written_before_checksums(root: Path) -> Path:
    """The store as remedy wrote it before end.json named its steps: an end marker of
    last steps only (no saved_steps, no checksums)."""
    end = json.loads((root / store.END_FILE).read_text())
    old = {key: end[key] for key in ("last_step", "global_step", "wall_time", "time")}
    (root / store.END_FILE).write_text(json.dumps(old))
    return root


@pytest.fixture
def old_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    one_file_per_step(monkeypatch)  # as stores were before packs
    root = tmp_path / "old"
    hook = every_step_hook(root, interval=2)  # losses every step, the others every 2nd
    train(hook, steps=6, eval_steps=2)
    hook.close()
    return written_before_checksums(root)


def test_an_old_store_reads_whole_and_reports_a_missing_step(old_store: Path) -> None:
    trial = create_trial(old_store)  # whole: nothing reported
    assert trial.steps() == list(range(6)) and trial.steps(store.ModeKeys.EVAL) == [0, 1]
    step_file(old_store, 4).unlink()
    with pytest.raises(IncompleteStore, match=r"call for 1 TRAIN step\(s\) with no .*: 4$"):
        create_trial(old_store)


def test_an_old_store_without_its_step_files_is_reported(old_store: Path) -> None:
    for path in (old_store / store.STEPS_DIR).rglob("*.safetensors"):
        path.unlink()  # remedy check said NoIssuesFound over 0 steps
    with pytest.raises(IncompleteStore, match=r"collections\.json: names tensors no step"):
        create_trial(old_store)


def test_the_evaluator_names_an_old_store_s_missing_steps_at_its_start(
    old_store: Path, tmp_path: Path
) -> None:
    step_file(old_store, 5).unlink()
    rules = tmp_path / "RULES.json"
    rules.write_text(json.dumps([{"name": "Loss", "rule": "LossNotDecreasing"}]))
    status_dir = tmp_path / "status"
    done = subprocess.run(
        [sys.executable, "-m", "remedy.debugger.evaluator", "--trial", str(old_store),
         "--rules", str(rules), "--status-dir", str(status_dir), "--poll-interval", "0.05"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr
    status = json.loads((status_dir / "Loss.json").read_text())
    assert status["RuleEvaluationStatus"] == "Error"
    assert "TRAIN step(s) with no step file" in status["StatusDetails"]
    assert status["StatusDetails"].endswith(": 5")


def packed_store(root: Path) -> Path:
    """Steps 0-2 in one pack and 3-5 in another, losses 1.0 to 0.5, end.json naming them."""
    new_store(root)
    for first in (0, 3):
        steps = range(first, first + 3)
        write_pack(root, {s: {"loss": np.array(1.0 - s / 10, dtype=np.float32)} for s in steps})
    store.write_end(root, {store.ModeKeys.TRAIN: 5}, 5, {store.ModeKeys.TRAIN: list(range(6))})
    return root


def pack_file(root: Path, first: int, last: int) -> Path:
    return store.step_dir(root, store.ModeKeys.TRAIN) / store.pack_file_name(first, last)


def test_a_missing_pack_is_named_by_its_steps(tmp_path: Path) -> None:
    root = packed_store(tmp_path)
    pack_file(root, 3, 5).unlink()
    with pytest.raises(IncompleteStore, match=r"end\.json: names 3 TRAIN step.*: 3, 4, 5$"):
        create_trial(root)


def test_a_flipped_byte_in_a_pack_fails_its_checksum(tmp_path: Path) -> None:
    root = packed_store(tmp_path)
    path = pack_file(root, 3, 5)
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x10  # step 5's loss
    path.write_bytes(bytes(data))
    loss = create_trial(root).tensor("loss")
    assert float(loss.value(2)) == pytest.approx(0.8)  # the other pack is sound
    with pytest.raises(CorruptStepFile, match=f"{path}: tensor '000000000005/loss' fails"):
        loss.value(4)  # the pack is checked whole, whichever of its steps is read


@pytest.mark.parametrize("damage", ["renamed", "foreign tensor"])
def test_a_pack_not_holding_what_its_name_says_is_named_after_the_steps_before_it(
    tmp_path: Path, damage: str
) -> None:
    root = new_store(tmp_path)
    write_pack(root, {0: {"loss": np.array(1.0)}, 1: {"loss": np.array(0.9)}})
    trial = create_trial(root)
    if damage == "renamed":  # steps 2-3 in a file named 2-4
        write_pack(root, {2: {"loss": np.array(0.8)}, 3: {"loss": np.array(0.7)}}).rename(
            pack_file(root, 2, 4)
        )
        bad, why = pack_file(root, 2, 4), "are not 2 to 4"
    else:  # a tensor of step 9 in a pack of steps 2-3
        write_pack(root, {2: {"loss": np.array(0.8)}, 3: {"loss": np.array(0.7)}})
        bad = pack_file(root, 2, 3)
        raw = bad.read_bytes().replace(b"000000000003/loss", b"000000000009/loss")
        size = int.from_bytes(raw[:8], "little")
        bad.write_bytes(raw[:8] + store.seal_header(raw[8 : 8 + size]) + raw[8 + size :])
        why = "'000000000009/loss' belongs to none of its steps"
    write_pack(root, {5: {"loss": np.array(0.5)}, 6: {"loss": np.array(0.4)}})
    with pytest.raises(CorruptStepFile, match=f"{bad}: not a pack of steps .*{why}"):
        trial.refresh()
    assert trial.steps() == [0, 1]  # what came before it stays readable; nothing after
