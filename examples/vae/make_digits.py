"""8x8 digit-like images: seven-segment strokes with jitter and noise, as a .npz."""

from __future__ import annotations

import argparse

import numpy as np

SEGMENTS = {  # (row0, col0, row1, col1) of each stroke on an 8x8 grid
    "top": (1, 2, 1, 5),
    "mid": (4, 2, 4, 5),
    "bot": (7, 2, 7, 5),
    "ul": (1, 2, 4, 2),
    "ur": (1, 5, 4, 5),
    "ll": (4, 2, 7, 2),
    "lr": (4, 5, 7, 5),
}
DIGITS = [
    "top ul ur ll lr bot",
    "ur lr",
    "top ur mid ll bot",
    "top ur mid lr bot",
    "ul ur mid lr",
    "top ul mid lr bot",
    "top ul mid ll lr bot",
    "top ur lr",
    "top ul ur mid ll lr bot",
    "top ul ur mid lr bot",
]


def digit(d: int, rng: np.random.Generator) -> np.ndarray:
    img = np.zeros((8, 8), np.float32)
    for name in DIGITS[d].split():
        r0, c0, r1, c1 = SEGMENTS[name]
        img[r0 : r1 + 1, c0 : c1 + 1] = 1.0
    img = np.roll(img, rng.integers(-1, 2, size=2), axis=(0, 1))
    return np.clip(img * rng.uniform(0.7, 1.0) + rng.normal(0, 0.1, img.shape), 0, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="digits.npz")
    parser.add_argument("--count", type=int, default=3000)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, args.count)
    images = np.stack([digit(int(d), rng) for d in labels])
    np.savez_compressed(args.out, images=images, labels=labels)


if __name__ == "__main__":
    main()
