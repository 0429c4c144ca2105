import os
import time
from pathlib import Path

import numpy as np
import pytest

from remedy.debugger import ModeKeys, store
from remedy.debugger.config import SaveConfig
from remedy.debugger.exceptions import CorruptStepFile
from remedy.debugger.readers import LocalStoreReader
from remedy.debugger.writer import StepRecord, StoreWriter
from tests.debugger.helpers import batched_from_the_first_step, new_store, write_step


def test_step_file_round_trip_keeps_shapes_dtypes_and_header(tmp_path: Path) -> None:
    new_store(tmp_path)
    tensors = {
        "loss": np.array(1.25, dtype=np.float32),  # 0-d must stay 0-d
        "gradient/fc.weight": np.arange(6, dtype=np.float64).reshape(2, 3).T,  # not C-contiguous
        "count": np.array([1, 2], dtype=np.int64),
    }
    write_step(tmp_path, 12, tensors, mode=ModeKeys.EVAL, global_step=40)

    assert (tmp_path / "steps" / "EVAL" / "000000000012.safetensors").is_file()
    reader = LocalStoreReader(tmp_path)
    header = reader.read_header(ModeKeys.EVAL, 12)
    assert (header.mode, header.mode_step, header.global_step) == (ModeKeys.EVAL, 12, 40)
    assert header.tensor_names == ("count", "gradient/fc.weight", "loss")
    for name, expected in tensors.items():
        value = reader.read_tensor(ModeKeys.EVAL, 12, name)
        assert value.shape == expected.shape and value.dtype == expected.dtype
        np.testing.assert_array_equal(value, expected)


def test_large_step_files_read_the_same_as_small_ones_and_the_arrays_are_the_callers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Step files from MAPPED_BYTES up are mapped and checked once, smaller ones read; a
    file whose map was let go (more than HELD_FILES checked since) is read tensor by
    tensor. Every path hands out the same values, each an array of the caller's own."""
    from remedy.debugger.readers import local

    monkeypatch.setattr(local, "HELD_FILES", 2)
    new_store(tmp_path)
    rng = np.random.default_rng(0)
    saved = {}
    for step in range(4):  # 20_000 float32 values: 80 kB, over MAPPED_BYTES when step is odd
        tensors = {
            "weights": rng.standard_normal(20_000 if step % 2 else 100).astype(np.float32),
            "bias": rng.standard_normal(3).astype(np.float64),
            "loss": np.array(step, dtype=np.float32),
        }
        write_step(tmp_path, step, tensors)
        saved[step] = tensors
    reader = LocalStoreReader(tmp_path)
    for _ in range(2):  # the second pass: steps 0 and 1 were let go
        for step, tensors in saved.items():
            for name, expected in tensors.items():
                value = reader.read_tensor(ModeKeys.TRAIN, step, name)
                assert value.shape == expected.shape and value.dtype == expected.dtype
                np.testing.assert_array_equal(value, expected)
                value[...] = -1  # writable, and nobody else's
        assert len(reader._held) == 2
    maps = Path("/proc/self/maps").read_text()
    mapped = [str(store.step_path(tmp_path, ModeKeys.TRAIN, s)) in maps for s in saved]
    assert mapped == [False, False, False, True]  # 1 let go, 0 and 2 small enough to read
    np.testing.assert_array_equal(
        reader.read_tensor(ModeKeys.TRAIN, 3, "weights"), saved[3]["weights"]
    )

    path = store.step_path(tmp_path, ModeKeys.TRAIN, 1)  # a mapped file, damaged
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x10  # the last byte of 'weights' (names are stored sorted)
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStepFile, match="tensor 'weights' fails its checksum"):
        LocalStoreReader(tmp_path).read_tensor(ModeKeys.TRAIN, 1, "loss")


def test_listing_ignores_temp_files_and_strays(tmp_path: Path) -> None:
    new_store(tmp_path)
    write_step(tmp_path, 1, {"loss": np.array(1.0)})
    steps = tmp_path / "steps" / "TRAIN"
    (steps / ".000000000002.safetensors.abc.tmp").write_bytes(b"half a step")
    (steps / "000000000003.safetensors.partial").write_bytes(b"x")
    (steps / "notes.txt").write_text("x")
    reader = LocalStoreReader(tmp_path)
    assert reader.list_steps(ModeKeys.TRAIN) == [1]
    assert reader.list_steps(ModeKeys.TRAIN, start_after=1) == []
    assert reader.list_steps(ModeKeys.EVAL) == []  # folder does not exist yet


def test_atomic_write_leaves_nothing_behind_on_failure(tmp_path: Path) -> None:
    target = tmp_path / "out.json"

    def fail(tmp: str) -> None:
        Path(tmp).write_text("partial")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        store.atomic_write(target, fail)
    assert os.listdir(tmp_path) == []


def test_atomic_write_replaces_whole_file(tmp_path: Path) -> None:
    target = tmp_path / "end.json"
    store.write_json(target, {"a": 1})
    store.write_json(target, {"b": 2})
    assert store.read_json(target) == {"b": 2}
    assert os.listdir(tmp_path) == ["end.json"]


def test_small_steps_are_written_in_packs_and_read_as_step_files_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer packs a batch's steps, one pack per mode; every step reads back with its
    own header (a step with no tensor included), and a listing that starts after a step
    inside a pack returns that pack's later steps."""
    from remedy.debugger import writer as writer_module

    monkeypatch.setattr(writer_module, "HAND_OVER_S", 10.0)  # one batch, however slow
    batched_from_the_first_step(monkeypatch)
    writer = StoreWriter(tmp_path, {}, SaveConfig(), lambda v: v, "numpy", "0")
    expected: dict[tuple[ModeKeys, int], dict[str, np.ndarray]] = {}
    for step in range(6):
        mode = ModeKeys.EVAL if step in (2, 3) else ModeKeys.TRAIN
        tensors = {} if step == 4 else {"loss": np.array(step / 10, dtype=np.float32)}
        if step == 1:
            tensors["gradient/w"] = np.arange(4, dtype=np.float64).reshape(2, 2)
        mode_step = step - 2 if mode is ModeKeys.EVAL else step
        writer.put(StepRecord(mode, mode_step, step, 100.0 + step, dict(tensors), {}))
        expected[(mode, mode_step)] = tensors
    writer.close({ModeKeys.TRAIN: 5, ModeKeys.EVAL: 1}, 5)
    train, evals = (sorted(os.listdir(tmp_path / "steps" / mode)) for mode in ("TRAIN", "EVAL"))
    assert train == [store.pack_file_name(0, 5)] and evals == [store.pack_file_name(0, 1)]

    reader = LocalStoreReader(tmp_path)
    assert reader.list_steps(ModeKeys.TRAIN) == [0, 1, 4, 5]
    assert reader.list_steps(ModeKeys.TRAIN, start_after=1) == [4, 5]
    assert reader.list_steps(ModeKeys.EVAL) == [0, 1]
    for (mode, mode_step), tensors in expected.items():
        header = reader.read_header(mode, mode_step)
        assert (header.mode, header.mode_step) == (mode, mode_step)
        assert header.wall_time == 100.0 + header.global_step
        assert header.tensor_names == tuple(sorted(tensors))
        for name, array in tensors.items():
            value = reader.read_tensor(mode, mode_step, name)
            assert value.dtype == array.dtype and value.shape == array.shape
            np.testing.assert_array_equal(value, array)


def test_a_jobs_first_steps_reach_the_store_one_by_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first EAGER_STEPS steps are handed to the writer as they come, not after a
    batch's HAND_OVER_S (a divergence at the start is seen at once); the steps after them
    wait in a batch."""
    from remedy.debugger import writer as writer_module

    monkeypatch.setattr(writer_module, "HAND_OVER_S", 10.0)  # a batch would wait 10 s
    monkeypatch.setattr(writer_module, "EAGER_STEPS", 2)
    writer = StoreWriter(tmp_path, {}, SaveConfig(), lambda v: v, "numpy", "0")
    steps = tmp_path / "steps" / "TRAIN"

    def written_within(seconds: float, count: int) -> list[str]:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            names = sorted(os.listdir(steps)) if steps.exists() else []
            if len(names) >= count:
                return names
            time.sleep(0.01)
        return sorted(os.listdir(steps)) if steps.exists() else []

    for step in range(4):
        loss = {"loss": np.array(step, dtype=np.float32)}
        writer.put(StepRecord(ModeKeys.TRAIN, step, step, 100.0 + step, loss, {}))
    eager = [store.step_file_name(0), store.step_file_name(1)]
    assert written_within(5.0, 2) == eager
    assert written_within(0.3, 3) == eager  # steps 2 and 3 wait in their batch
    writer.close({ModeKeys.TRAIN: 3}, 3)
    assert sorted(os.listdir(steps)) == [*eager, store.pack_file_name(2, 3)]


def test_step_file_names() -> None:
    assert store.step_file_name(7) == "000000000007.safetensors"
    assert store.parse_step_file_name("000000000007.safetensors") == 7
    assert store.parse_step_file_name(".000000000007.safetensors.x.tmp") is None
    assert store.parse_step_file_name("7.safetensors") is None


def test_listing_is_a_gap_free_prefix_when_a_scan_races_a_writer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A directory scan may miss a file created during it yet return a later one.
    def files(*steps: int) -> list[store.StepFile]:
        return [store.StepFile(s, s, store.step_file_name(s), packed=False) for s in steps]

    scans = iter([files(0, 2), files(0, 1, 2, 3)])
    reader = LocalStoreReader(tmp_path)
    monkeypatch.setattr(reader, "_scan", lambda mode: next(scans))
    assert reader.list_steps(ModeKeys.TRAIN) == [0, 1, 2]  # 3 waits for the next listing
