#!/usr/bin/env python3
"""PyTorch reference for recipes/csv_tiers_mlp.toml (issue 38's CSV bar): the same table
(data/make_csv.py), the same encoding (numeric columns standardized with the training rows' mean
and population standard deviation, missing values given the training mean; categorical columns
one-hot over the training rows' sorted categories, missing ones given the most frequent, ties to
the first in sort order; classes sorted), the same 19-64-64-4 ReLU MLP, AdamW (no decay on biases),
cosine schedule per step, batch size and epochs, on the CPU. Prints one JSON object per seed and
one with their mean; compare with `genesis train recipes/csv_tiers_mlp.toml --set run.seed=S`.

    python3 data/make_csv.py
    python3 scripts/bench/torch_csv.py [--data DATA_ROOT/csv_tiers] [--seeds 0,1,2] [--threads 2]

--task regression is the reference for recipes/csv_spend_mlp.toml: label spend, standardized with
the training rows' mean and population standard deviation, a 19-64-64-1 MLP trained with
mean squared error; it prints the test r2, mae and rmse (in the label's units).

    python3 data/make_csv.py --task regression
    python3 scripts/bench/torch_csv.py --task regression [--data DATA_ROOT/csv_spend]
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
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data"))
from genesis_paths import data_root  # noqa: E402  where data/make_csv.py writes by default

LABEL = "tier"  # "spend" with --task regression
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
    if LABEL == "spend":  # a regression: the label's mean and population standard deviation
        values = [float(r[label]) for r in rows]
        mean = sum(values) / len(values)
        return encoding, (mean, math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)))
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
    if isinstance(classes, tuple):  # a regression's (mean, std)
        y = [[(float(r[label]) - classes[0]) / classes[1]] for r in rows]
        return torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.float32)
    y = [classes.index(r[label].strip(" \t")) for r in rows]
    return torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.long)


def run(seed, data, threads, epochs=20, scale=None):
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    (xtr, ytr), (xte, yte) = data
    outputs = 1 if scale else int(ytr.max()) + 1
    model = nn.Sequential(nn.Linear(xtr.shape[1], 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, outputs))
    loss_fn = nn.functional.mse_loss if scale else nn.functional.cross_entropy
    train(model, xtr, ytr, epochs, batch=128, lr=3e-3, wd=1e-4, loss_fn=loss_fn)
    model.eval()
    result = {"seed": seed, "epochs": epochs, "inputs": xtr.shape[1], "torch": torch.__version__}
    with torch.no_grad():
        predicted = model(xte)
    if scale:
        error = (predicted - yte).double()
        y = yte.double()
        result["test_r2"] = 1 - (error ** 2).sum().item() / ((y - y.mean()) ** 2).sum().item()
        result["test_mae"] = error.abs().mean().item() * scale[1]
        result["test_rmse"] = math.sqrt((error ** 2).mean().item()) * scale[1]
    else:
        result["test_accuracy"] = (predicted.argmax(1) == yte).float().mean().item()
    return result


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=os.path.join(data_root(), "csv_tiers"))
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--task", choices=["classification", "regression"], default="classification")
    args = ap.parse_args()
    global LABEL
    if args.task == "regression":
        LABEL = "spend"
        if args.data == ap.get_default("data"):
            args.data = os.path.join(data_root(), "csv_spend")
    header, train_rows = read(f"{args.data}/train.csv")
    test_header, test_rows = read(f"{args.data}/test.csv")
    assert test_header == header, "test.csv's columns differ from train.csv's"
    encoding, classes = fit(header, train_rows)
    data = (encode(header, train_rows, encoding, classes), encode(header, test_rows, encoding, classes))
    scale = classes if args.task == "regression" else None
    metric = "test_r2" if scale else "test_accuracy"
    values = []
    for seed in (int(s) for s in args.seeds.split(",")):
        result = run(seed, data, args.threads, scale=scale)
        values.append(result[metric])
        print(json.dumps(result), flush=True)
    print(json.dumps({"mean_" + metric: statistics.mean(values), "seeds": len(values)}))


if __name__ == "__main__":
    main()
