#!/usr/bin/env python3
"""PyTorch reference for recipes/fashion_mnist_{mlp,cnn}.toml: the same model, data,
normalization, optimizer (AdamW, decay excluded from biases), cosine schedule per step
and batch size, on the CPU with a fixed thread count. Prints one JSON object per model.

    python3 scripts/reference/torch_fashion_mnist.py --data DIR [--threads 2] [--models mlp,cnn]
"""
import argparse
import gzip
import json
import math
import struct
import time

import torch
import torch.nn as nn


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    shape = struct.unpack(">" + "I" * ndim, data[4 : 4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim :]), dtype=torch.uint8).reshape(shape)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(f"{data_dir}/{prefix}-images-idx3-ubyte.gz").float().div_(255.0).unsqueeze(1)
    y = read_idx(f"{data_dir}/{prefix}-labels-idx1-ubyte.gz").long()
    return x, y


def make_model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, 10))


def train(model, xtr, ytr, epochs, batch=128, lr=1e-3, wd=1e-4, loss_fn=nn.functional.cross_entropy):
    """genesis's classifier recipes: AdamW (no decay on biases), cosine schedule per step, a fresh
    shuffle each epoch, the last batch partial; loss_fn(outputs, targets) (a regression: mse_loss).
    Returns each epoch's seconds."""
    decay = [p for n, p in model.named_parameters() if not n.endswith("bias")]
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=lr)
    steps_per_epoch = math.ceil(len(xtr) / batch)
    total = epochs * steps_per_epoch
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
    epoch_times = []
    for epoch in range(epochs):
        perm = torch.randperm(len(xtr))
        t0 = time.perf_counter()
        model.train()
        for i in range(steps_per_epoch):
            idx = perm[i * batch : (i + 1) * batch]
            loss = loss_fn(model(xtr[idx]), ytr[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
        epoch_times.append(time.perf_counter() - t0)
    return epoch_times


def run(name, epochs, data, threads, seed):
    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    (xtr, ytr), (xte, yte) = data
    model = make_model(name)
    epoch_times = train(model, xtr, ytr, epochs)
    model.eval()
    with torch.no_grad():
        correct = sum((model(xte[i : i + 1000]).argmax(1) == yte[i : i + 1000]).sum().item()
                      for i in range(0, len(xte), 1000))
    epoch_times.sort()
    return {"model": name, "epochs": epochs, "threads": threads, "test_accuracy": correct / len(xte),
            "median_epoch_s": epoch_times[len(epoch_times) // 2], "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    xtr, ytr = load(args.data, "train")
    xte, yte = load(args.data, "test")
    mean, std = xtr.mean().item(), xtr.std().item()
    data = (((xtr - mean) / std, ytr), ((xte - mean) / std, yte))
    for name in args.models.split(","):
        print(json.dumps(run(name, 10 if name == "mlp" else 5, data, args.threads, args.seed)), flush=True)


if __name__ == "__main__":
    main()
