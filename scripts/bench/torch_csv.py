#!/usr/bin/env python3
"""PyTorch reference for recipes/csv_tiers_mlp.toml (issue 38's CSV bar): the same table
(data/make_csv.py), the same encoding (numeric columns standardized with the training rows' mean
and population standard deviation, missing values given the training mean; categorical columns
one-hot over the training rows' sorted categories, missing ones given the most frequent, ties to
the first in sort order; classes sorted), the same 19-64-64-4 ReLU MLP, AdamW (no decay on biases),
cosine schedule per step, batch size and epochs, on the CPU. Prints one JSON object per seed and
one with their mean; compare with `genesis train recipes/csv_tiers_mlp.toml --set run.seed=S`.

    python3 data/make_csv.py
    python3 scripts/bench/torch_csv.py [--data data/cache/csv_tiers] [--seeds 0,1,2] [--threads 2]
"""
import argparse
import csv
import json
import math
import os
import statistics
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference"))
from torch_fashion_mnist import train  # noqa: E402  the classifier recipes' training loop

LABEL = "tier"
CATEGORICAL = ["region", "plan", "city"]


def read(path):
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    return rows[0], rows[1:]


def fit(header, rows):
    """The encoding of each feature column from the training rows."""
    encoding = []
    for j, name in enumerate(header):
        if name == LABEL:
            continue
        values = [r[j].strip(" \t") for r in rows if r[j].strip(" \t")]
        if name in CATEGORICAL:
            categories = sorted(set(values))
            counts = {c: values.count(c) for c in categories}
            most = max(categories, key=lambda c: (counts[c], -categories.index(c)))
            encoding.append((j, "categorical", categories, most))
        else:
            numbers = [float(v) for v in values]
            mean = sum(numbers) / len(numbers)
            std = math.sqrt(sum((x - mean) ** 2 for x in numbers) / len(numbers)) or 1.0
            encoding.append((j, "numeric", mean, std))
    label = header.index(LABEL)
    classes = sorted({r[label].strip(" \t") for r in rows})
    return encoding, classes


def encode(header, rows, encoding, classes):
    label = header.index(LABEL)
    x = []
    for r in rows:
        features = []
        for j, kind, a, b in encoding:
            v = r[j].strip(" \t")
            if kind == "numeric":
                features.append(((float(v) if v else a) - a) / b)
            else:
                features.extend(1.0 if c == (v or b) else 0.0 for c in a)
        x.append(features)
    y = [classes.index(r[label].strip(" \t")) for r in rows]
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long)


def run(seed, data, threads, epochs=20):
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    (xtr, ytr), (xte, yte) = data
    classes = int(ytr.max()) + 1
    model = nn.Sequential(nn.Linear(xtr.shape[1], 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, classes))
    train(model, xtr, ytr, epochs, batch=128, lr=3e-3, wd=1e-4)
    model.eval()
    with torch.no_grad():
        accuracy = (model(xte).argmax(1) == yte).float().mean().item()
    return {"seed": seed, "epochs": epochs, "inputs": xtr.shape[1], "test_accuracy": accuracy, "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="data/cache/csv_tiers")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    header, train_rows = read(f"{args.data}/train.csv")
    test_header, test_rows = read(f"{args.data}/test.csv")
    assert test_header == header, "test.csv's columns differ from train.csv's"
    encoding, classes = fit(header, train_rows)
    data = (encode(header, train_rows, encoding, classes), encode(header, test_rows, encoding, classes))
    accuracies = []
    for seed in (int(s) for s in args.seeds.split(",")):
        result = run(seed, data, args.threads)
        accuracies.append(result["test_accuracy"])
        print(json.dumps(result), flush=True)
    print(json.dumps({"mean_test_accuracy": statistics.mean(accuracies), "seeds": len(accuracies)}))


if __name__ == "__main__":
    main()
