"""Writes a CSV of 6,000 rows: 12 noisy features whose means depend on one of 4 classes
(the last column). Learnable to about 96 % accuracy; chance is 25 %."""

import argparse
import csv
import math
import random

parser = argparse.ArgumentParser()
parser.add_argument("--out", default="data.csv")
parser.add_argument("--rows", type=int, default=6000)
args = parser.parse_args()
rng = random.Random(0)
with open(args.out, "w", newline="") as f:
    writer = csv.writer(f)
    writer.writerow([f"f{i}" for i in range(12)] + ["label"])
    for _ in range(args.rows):
        label = rng.randrange(4)
        features = [rng.gauss(math.sin(label * (i + 1)) * 1.5, 1.0) for i in range(12)]
        writer.writerow([f"{v:.4f}" for v in features] + [label])
