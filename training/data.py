"""Datasets for the job: CIFAR-10 from its python batches, or a synthetic stand-in.

Both give float32 NCHW images scaled as pixels / 256 (as the seed does) and int64 labels.
The CIFAR-10 batches are pickles, so they are read with an unpickler that can only rebuild
numpy arrays and bytes: a tampered file cannot run code.
"""

import codecs
import io
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from remedy.state_schema.hyperparameters import BUILTIN_NUM_CLASSES

IMAGE_SHAPE = (3, 32, 32)
PIXELS = 3 * 32 * 32
NUM_CLASSES = BUILTIN_NUM_CLASSES
TRAIN_FILES = [f"data_batch_{i}" for i in range(1, 6)]
TEST_FILE = "test_batch"


@dataclass
class DataSplit:
    images: torch.Tensor  # float32 (N, 3, 32, 32), pixels / 256
    labels: torch.Tensor  # int64 (N,)
    # Sample ids (position in the split as loaded) and the files they came from, in order:
    # they name a batch's records for contact tracing, and stay put when samples are dropped.
    ids: torch.Tensor | None = None  # int64 (N,); None: 0..N-1
    shards: tuple[tuple[str, int], ...] = ()  # (file name, number of samples)

    def __post_init__(self) -> None:
        if self.ids is None:
            self.ids = torch.arange(len(self.labels))
        if not self.shards:
            self.shards = (("synthetic", len(self.labels)),)

    def __len__(self) -> int:
        return len(self.labels)

    def shard_of(self, sample_id: int) -> str:
        """'file:index in file' of a sample id."""
        start = 0
        for name, count in self.shards:
            if sample_id < start + count:
                return f"{name}:{sample_id - start}"
            start += count
        raise IndexError(f"sample id {sample_id} is beyond the {start} samples loaded")

    def without(self, sample_ids: list[int]) -> "DataSplit":
        """The split less the given sample ids (ids that are not present are ignored)."""
        assert self.ids is not None
        keep = ~torch.isin(self.ids, torch.tensor(sample_ids, dtype=torch.int64))
        return DataSplit(self.images[keep], self.labels[keep], self.ids[keep], self.shards)


def to_split(
    pixels: np.ndarray, labels: np.ndarray, shards: tuple[tuple[str, int], ...] = ()
) -> DataSplit:
    images = torch.from_numpy(pixels.astype(np.float32) / 256.0)
    return DataSplit(images, torch.from_numpy(labels.astype(np.int64)), shards=shards)


# ---------------------------------------------------------------------------------------
# CIFAR-10 python batches


class CifarFormatError(ValueError):
    pass


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    # Protocol-2 pickles written by Python 3 store bytes as _codecs.encode(text, "latin1").
    if encoding != "latin1":
        raise pickle.UnpicklingError(f"_codecs.encode with encoding {encoding!r} is not allowed")
    return codecs.encode(text, "latin1")


def _numpy_reconstruct() -> Any:
    return np.ndarray.__reduce__(np.zeros(1))[0]  # numpy's _reconstruct, wherever it lives


_ALLOWED_GLOBALS: dict[tuple[str, str], Any] = {
    ("numpy.core.multiarray", "_reconstruct"): _numpy_reconstruct(),  # numpy 1 pickles
    ("numpy._core.multiarray", "_reconstruct"): _numpy_reconstruct(),  # numpy 2 pickles
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_encode,
}


class _ArrayOnlyUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in _ALLOWED_GLOBALS:
            raise pickle.UnpicklingError(f"global {module}.{name} is not allowed")
        return _ALLOWED_GLOBALS[(module, name)]


def read_cifar_batch(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 python batch -> (pixels (N, 3, 32, 32), int64 labels (N,)).

    Pixels are uint8 as in CIFAR-10, or float32 on the same 0..255 scale, as preprocessing
    pipelines export them (where a corrupt record can hold any value: the NaN guard's case).
    """
    path = Path(path)
    if not path.is_file():
        raise CifarFormatError(f"{path}: CIFAR-10 batch file not found")
    try:
        raw = _ArrayOnlyUnpickler(io.BytesIO(path.read_bytes()), encoding="bytes").load()
    except Exception as exc:  # truncated, corrupt or disallowed content
        raise CifarFormatError(f"{path}: not a readable CIFAR-10 batch ({exc})") from exc
    if not isinstance(raw, dict) or b"data" not in raw or b"labels" not in raw:
        raise CifarFormatError(f"{path}: expected a dict with b'data' and b'labels'")
    data, labels = raw[b"data"], np.asarray(raw[b"labels"])
    if not isinstance(data, np.ndarray) or data.dtype not in (np.uint8, np.float32):
        raise CifarFormatError(f"{path}: b'data' must be a uint8 or float32 array")
    if data.ndim != 2:
        raise CifarFormatError(f"{path}: b'data' must have shape (N, {PIXELS})")
    if data.shape[1] != PIXELS or labels.shape != (data.shape[0],):
        raise CifarFormatError(
            f"{path}: b'data' has shape {data.shape} and b'labels' {labels.shape}; "
            f"expected (N, {PIXELS}) and (N,)"
        )
    if labels.dtype.kind not in "iu":
        raise CifarFormatError(f"{path}: b'labels' must be integers, got {labels.dtype}")
    if labels.size and (labels.min() < 0 or labels.max() >= NUM_CLASSES):
        raise CifarFormatError(f"{path}: labels must lie in 0..{NUM_CLASSES - 1}")
    return data.reshape(-1, *IMAGE_SHAPE), labels.astype(np.int64)


def _read_files(paths: list[Path], limit: int | None) -> DataSplit:
    pixels, labels, shards, count = [], [], [], 0
    for path in paths:
        if limit is not None and count >= limit:
            break  # enough samples: skip reading the remaining files
        x, y = read_cifar_batch(path)
        pixels.append(x)
        labels.append(y)
        used = len(y) if limit is None else min(len(y), limit - count)
        shards.append((path.name, used))
        count += len(y)
    x, y = np.concatenate(pixels), np.concatenate(labels)
    return to_split(x[:limit], y[:limit], tuple(shards))


def load_cifar10(
    folder: str | Path, train_samples: int | None = None, test_samples: int | None = None
) -> tuple[DataSplit, DataSplit]:
    """CIFAR-10 from the python-version folder (data_batch_1..5, test_batch)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CifarFormatError(f"{folder}: CIFAR-10 folder not found")
    train = _read_files([folder / name for name in TRAIN_FILES], train_samples)
    test = _read_files([folder / TEST_FILE], test_samples)
    return train, test


def check_cifar10_folder(folder: str | Path) -> None:
    """Fail fast, before a job is launched, on a folder that cannot be loaded."""
    folder = Path(folder)
    if not folder.is_dir():
        raise CifarFormatError(f"{folder}: CIFAR-10 folder not found")
    read_cifar_batch(folder / TRAIN_FILES[0])
    read_cifar_batch(folder / TEST_FILE)


# ---------------------------------------------------------------------------------------
# Synthetic data: smooth per-class patterns, randomly shifted, rescaled and noised.
# A convnet has to learn shift-tolerant features to separate them, but no memorisation.


def _class_prototypes(rng: np.random.Generator, frequencies: int = 4) -> np.ndarray:
    """One smooth (3, 32, 32) pattern per class: a sum of low-frequency periodic waves."""
    grid = np.arange(32) / 32.0
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    shape = (NUM_CLASSES, 3, frequencies)
    fy = rng.integers(0, 4, shape)
    fx = rng.integers(0, 4, shape)
    phase = rng.uniform(0, 2 * np.pi, shape)
    amplitude = rng.uniform(0.5, 1.0, shape)
    waves = amplitude[..., None, None] * np.cos(
        2 * np.pi * (fy[..., None, None] * yy + fx[..., None, None] * xx) + phase[..., None, None]
    )
    patterns = waves.sum(axis=2)  # (classes, 3, 32, 32)
    patterns /= np.abs(patterns).max(axis=(1, 2, 3), keepdims=True)
    return patterns.astype(np.float32)  # in [-1, 1]; float32 keeps generation fast


def synthetic_pixels(
    num_samples: int, seed: int, max_shift: int = 8, noise: float = 0.25
) -> tuple[np.ndarray, np.ndarray]:
    """uint8 images (N, 3, 32, 32) and int64 labels, deterministic given the seed.

    The class prototypes depend only on a fixed seed so that train and test sets drawn with
    different seeds share the same classes.
    """
    prototypes = _class_prototypes(np.random.default_rng(1234))
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, NUM_CLASSES, num_samples)
    # Circular shift of each image by up to max_shift pixels in y and x.
    shift_y = rng.integers(-max_shift, max_shift + 1, num_samples)
    shift_x = rng.integers(-max_shift, max_shift + 1, num_samples)
    rows = (np.arange(32)[None, :] - shift_y[:, None]) % 32
    cols = (np.arange(32)[None, :] - shift_x[:, None]) % 32
    images = prototypes[
        labels[:, None, None, None],
        np.arange(3)[None, :, None, None],
        rows[:, None, :, None],
        cols[:, None, None, :],
    ]
    contrast = rng.uniform(0.15, 0.35, (num_samples, 1, 1, 1)).astype(np.float32)
    brightness = rng.uniform(0.35, 0.65, (num_samples, 1, 1, 1)).astype(np.float32)
    images *= contrast
    images += brightness
    images += noise * rng.standard_normal(images.shape, dtype=np.float32)
    pixels = np.clip(images * 256.0, 0, 255).astype(np.uint8)  # truncation, as 8-bit pixels
    return pixels, labels.astype(np.int64)


def make_synthetic(num_train: int, num_test: int, seed: int = 0) -> tuple[DataSplit, DataSplit]:
    """Synthetic train and test splits; the test split uses an independent stream."""
    train = to_split(*synthetic_pixels(num_train, seed=2 * seed))
    test = to_split(*synthetic_pixels(num_test, seed=2 * seed + 1))
    return train, test
