import io
import os
import pickle
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from remedy.models import ResNetConfig, build_model
from remedy.training.data import (
    CifarFormatError,
    load_cifar10,
    make_synthetic,
    read_cifar_batch,
    synthetic_pixels,
)
from tests.helpers.cifar import write_cifar_batch, write_tiny_cifar10


def test_tiny_cifar_folder_is_in_the_genuine_python_format(tmp_path: Path) -> None:
    folder = write_tiny_cifar10(tmp_path, samples_per_batch=6, test_samples=4)
    names = sorted(p.name for p in folder.iterdir())
    assert names == [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    with open(folder / "data_batch_2", "rb") as f:
        raw = pickle.load(f, encoding="bytes")  # how the official loading snippet reads it
    assert set(raw) == {b"data", b"labels", b"batch_label", b"filenames"}
    assert raw[b"data"].dtype == np.uint8 and raw[b"data"].shape == (6, 3072)
    assert isinstance(raw[b"labels"], list) and len(raw[b"labels"]) == 6
    assert raw[b"batch_label"] == b"training batch 2 of 5"
    assert all(isinstance(name, bytes) for name in raw[b"filenames"])
    assert (folder / "data_batch_1").read_bytes()[:2] == b"\x80\x02"  # pickle protocol 2


def test_load_cifar10_scales_pixels_and_keeps_labels(tmp_path: Path) -> None:
    pixels = np.zeros((4, 3, 32, 32), np.uint8)
    pixels[0, 0, 0, 0], pixels[1, 2, 31, 31] = 255, 128
    labels = np.array([3, 1, 4, 1])
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        write_cifar_batch(tmp_path / name, pixels, labels, name)
    train, test = load_cifar10(tmp_path)
    assert train.images.shape == (20, 3, 32, 32) and train.images.dtype == torch.float32
    assert test.images.shape == (4, 3, 32, 32)
    assert train.images[0, 0, 0, 0].item() == 255 / 256
    assert train.images[1, 2, 31, 31].item() == 0.5
    assert train.labels.dtype == torch.int64
    assert train.labels.tolist() == labels.tolist() * 5


def test_sample_limits_span_batches(tmp_path: Path) -> None:
    write_tiny_cifar10(tmp_path, samples_per_batch=5, test_samples=8)
    train, test = load_cifar10(tmp_path, train_samples=12, test_samples=3)
    assert len(train) == 12 and len(test) == 3
    first, _ = read_cifar_batch(tmp_path / "data_batch_1")
    third, _ = read_cifar_batch(tmp_path / "data_batch_3")
    assert torch.equal(train.images[0], torch.from_numpy(first[0]).float() / 256)
    assert torch.equal(train.images[10], torch.from_numpy(third[0]).float() / 256)


class Python2Pickler(pickle._Pickler):
    """Writes what the official files hold: Python 2 str opcodes, numpy.core globals."""

    dispatch = dict(pickle._Pickler.dispatch)

    def save_bytes(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    def save_str(self, obj: str) -> None:
        self.save_bytes(obj.encode("latin1"))

    def save_global(self, obj: Any, name: str | None = None) -> None:
        if getattr(obj, "__name__", "") == "_reconstruct":  # numpy 1's module path
            self.write(pickle.GLOBAL + b"numpy.core.multiarray\n_reconstruct\n")
            self.memoize(obj)
            return
        super().save_global(obj, name)

    dispatch[bytes] = save_bytes
    dispatch[str] = save_str
    dispatch[type(len)] = save_global


def test_a_batch_pickled_by_python2_and_numpy1_loads(tmp_path: Path) -> None:
    pixels = np.arange(2 * 3072).astype(np.uint8).reshape(2, 3072)
    record = {b"batch_label": b"x", b"labels": [7, 2], b"data": pixels, b"filenames": [b"a", b"b"]}
    buffer = io.BytesIO()
    Python2Pickler(buffer, protocol=2).dump(record)
    assert b"numpy.core.multiarray" in buffer.getvalue() and b"_codecs" not in buffer.getvalue()
    (tmp_path / "data_batch_1").write_bytes(buffer.getvalue())
    images, labels = read_cifar_batch(tmp_path / "data_batch_1")
    assert np.array_equal(images.reshape(2, 3072), pixels) and labels.tolist() == [7, 2]


class Evil:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_with_a_disallowed_global_is_rejected_unexecuted(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    record = {b"data": np.zeros((1, 3072), np.uint8), b"labels": [0], b"x": Evil(marker)}
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps(record, protocol=2))
    with pytest.raises(CifarFormatError, match="data_batch_1.*not allowed"):
        read_cifar_batch(path)
    assert not marker.exists()


def test_a_wrong_shape_batch_is_rejected_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / "test_batch"
    record = {b"data": np.zeros((2, 1024), np.uint8), b"labels": [0, 1]}
    path.write_bytes(pickle.dumps(record, protocol=2))
    with pytest.raises(CifarFormatError, match="test_batch.*shape"):
        read_cifar_batch(path)


def test_labels_must_match_the_images(tmp_path: Path) -> None:
    path = tmp_path / "data_batch_1"
    record = {b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1, 2]}
    path.write_bytes(pickle.dumps(record, protocol=2))
    with pytest.raises(CifarFormatError, match="data_batch_1"):
        read_cifar_batch(path)


def test_missing_and_truncated_files_are_named(tmp_path: Path) -> None:
    write_tiny_cifar10(tmp_path, samples_per_batch=2, test_samples=2)
    (tmp_path / "data_batch_4").unlink()
    with pytest.raises(CifarFormatError, match="data_batch_4.*not found"):
        load_cifar10(tmp_path)
    whole = (tmp_path / "data_batch_2").read_bytes()
    (tmp_path / "data_batch_2").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(CifarFormatError, match="data_batch_2.*not a readable"):
        read_cifar_batch(tmp_path / "data_batch_2")
    with pytest.raises(CifarFormatError, match="not found"):
        load_cifar10(tmp_path / "nowhere")


def test_synthetic_data_is_deterministic_by_seed() -> None:
    a_pixels, a_labels = synthetic_pixels(50, seed=3)
    b_pixels, b_labels = synthetic_pixels(50, seed=3)
    c_pixels, _ = synthetic_pixels(50, seed=4)
    assert np.array_equal(a_pixels, b_pixels) and np.array_equal(a_labels, b_labels)
    assert not np.array_equal(a_pixels, c_pixels)
    train, test = make_synthetic(40, 30, seed=1)
    assert train.images.shape == (40, 3, 32, 32) and test.images.shape == (30, 3, 32, 32)
    assert train.images.dtype == torch.float32 and 0 <= train.images.min() < train.images.max() < 1
    assert not torch.equal(train.images[:30], test.images)  # independent streams
    assert set(train.labels.tolist()) <= set(range(10))


def test_synthetic_data_is_learnable() -> None:
    torch.manual_seed(0)
    train, test = make_synthetic(640, 300, seed=0)
    model = build_model(ResNetConfig(depth=8, width=4, batch_norm=True))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def test_loss() -> float:
        model.eval()
        with torch.no_grad():
            return loss_fn(model(test.images), test.labels).item()

    before = test_loss()
    for _ in range(4):
        model.train()
        for batch in torch.randperm(len(train)).split(32):
            loss = loss_fn(model(train.images[batch]), train.labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    assert test_loss() < 0.8 * before
