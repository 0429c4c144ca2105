"""A small CIFAR-10 folder in the genuine python format, written from synthetic images."""

import pickle
from pathlib import Path

import numpy as np

from remedy.training.data import PIXELS, TEST_FILE, TRAIN_FILES, read_cifar_batch, synthetic_pixels

BAD_SAMPLE = 23  # data_batch_2 holds samples 20..39: record 3 of that file


def write_cifar_batch(
    path: str | Path, pixels: np.ndarray, labels: np.ndarray, batch_label: str
) -> None:
    """Write pixels (N, 3, 32, 32) as a batch in the genuine CIFAR-10 python format
    (uint8; float32 pixels stay float32, the preprocessed variant read_cifar_batch accepts)."""
    dtype = np.float32 if pixels.dtype == np.float32 else np.uint8
    record = {
        b"batch_label": batch_label.encode(),
        b"labels": [int(label) for label in labels],
        b"data": np.ascontiguousarray(pixels, dtype=dtype).reshape(len(labels), PIXELS),
        b"filenames": [f"synthetic_{i:05d}.png".encode() for i in range(len(labels))],
    }
    Path(path).write_bytes(pickle.dumps(record, protocol=2))


def write_tiny_cifar10(
    folder: str | Path, samples_per_batch: int = 20, test_samples: int = 20, seed: int = 0
) -> Path:
    """A small CIFAR-10-format folder filled with synthetic images."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    pixels, labels = synthetic_pixels(5 * samples_per_batch + test_samples, seed)
    for i, name in enumerate(TRAIN_FILES):
        part = slice(i * samples_per_batch, (i + 1) * samples_per_batch)
        write_cifar_batch(folder / name, pixels[part], labels[part], f"training batch {i + 1} of 5")
    rest = slice(5 * samples_per_batch, None)
    write_cifar_batch(folder / TEST_FILE, pixels[rest], labels[rest], "testing batch 1 of 1")
    return folder


def corrupt_cifar(folder: Path) -> Path:
    """Tiny CIFAR-10 folder whose sample 23 has one infinite pixel (a float32 export)."""
    write_tiny_cifar10(folder, samples_per_batch=20, test_samples=20)
    pixels, labels = read_cifar_batch(folder / "data_batch_2")
    pixels = pixels.astype(np.float32)
    pixels[BAD_SAMPLE - 20, 1, 7, 7] = np.inf
    write_cifar_batch(folder / "data_batch_2", pixels, labels, "training batch 2 of 5")
    return folder
