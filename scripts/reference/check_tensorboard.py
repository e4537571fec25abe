#!/usr/bin/env python3
"""Reads a genesis run's TensorBoard event files with TensorBoard's own EventAccumulator and
compares every scalar with metrics.jsonl (as float32). Runs where tensorboard is installed
(the GPU hosts have it); exits non-zero on any difference.

    python3 scripts/reference/check_tensorboard.py runs/fashion_mnist_mlp
"""
import json
import struct
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def main(run_dir):
    acc = EventAccumulator(run_dir, size_guidance={"scalars": 0})
    acc.Reload()
    curves = {tag: {e.step: e.value for e in acc.Scalars(tag)} for tag in acc.Tags()["scalars"]}
    checked = 0
    for line in open(f"{run_dir}/metrics.jsonl"):
        j = json.loads(line)
        step = j["step"]
        pairs = [(f"eval/{k}", v) for k, v in j["eval"].items()] if "eval" in j else \
            [(f"train/{k}", j[k]) for k in ("loss", "lr", "grad_norm", "samples_per_s") if k in j]
        for tag, value in pairs:
            got = curves.get(tag, {}).get(step)
            if got is None or got != f32(value):
                print(f"MISMATCH {tag} at step {step}: tensorboard {got}, metrics.jsonl {value}")
                return 1
            checked += 1
    print(f"tensorboard reads {checked} scalars of {run_dir} equal to metrics.jsonl ({sorted(curves)})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
