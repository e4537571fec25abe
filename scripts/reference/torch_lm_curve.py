#!/usr/bin/env python3
"""PyTorch eager's side of a genesis training-curve comparison (GPU host).

`init` writes a randomly initialized Hugging Face GPT-2 (transformers' own initialization, a
fixed seed, dropout off) that `genesis train` starts from (model.init_from). `train` trains the
same directory in PyTorch eager (transformers' GPT2LMHeadModel with SDPA, bf16 autocast, f32
master weights, fused AdamW) on the windows of a genesis token shard in shard order, as
`genesis train` reads them with data.shuffle = false, with the recipe's optimizer groups
(no_decay by substring), warmup + cosine schedule (libgenesis/optim/lr_schedule.cpp's formula)
and norm clipping, and prints the mean loss of each log window as genesis's metrics.jsonl
records it. `compare` prints both curves and their largest relative difference.

  torch_lm_curve.py init DIR
  torch_lm_curve.py train DIR SHARD --steps 200 --json OUT.json
  torch_lm_curve.py compare OUT.json GENESIS_RUN/metrics.jsonl [--tolerance 0.01]
The defaults are recipes/gpt2_124m.toml's settings.
"""
import argparse
import json
import math
import struct
import sys

import numpy as np


def read_shard(path):
    with open(path, "rb") as f:
        head = f.read(32)
        if head[:8] != b"GENTOKEN":
            sys.exit(f"{path}: not a genesis token shard")
        _, token_bytes, count, _ = struct.unpack("<IIQQ", head[8:32])
        return np.fromfile(f, dtype=np.uint16 if token_bytes == 2 else np.uint32, count=count)


def lr_at(step, a):
    if step < a.warmup:
        return a.lr * (a.warmup_start_factor + (1.0 - a.warmup_start_factor) * step / a.warmup)
    span = max(0, a.steps - a.warmup)
    pct = min(step - a.warmup, span) / span if span > 0 else 1.0
    return a.lr * (a.min_lr_factor + (1.0 - a.min_lr_factor) * (1.0 + math.cos(math.pi * pct)) / 2.0)


def init(a):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel
    torch.manual_seed(a.seed)
    config = GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    GPT2LMHeadModel(config).save_pretrained(a.dir)


def train(a):
    import torch
    import torch.nn.functional as F
    from transformers import GPT2LMHeadModel
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = GPT2LMHeadModel.from_pretrained(a.dir, torch_dtype=torch.float32, attn_implementation="sdpa").cuda()
    model.train()
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        (no_decay if any(s in name for s in a.no_decay) else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, fused=True)
    tokens = read_shard(a.shard)
    windows = (len(tokens) - 1) // a.seq
    per_epoch = windows // a.batch
    losses, window_sum = [], 0.0
    for step in range(a.steps):
        first = (step % per_epoch) * a.batch  # shard order, every epoch alike
        rows = np.stack([tokens[(first + b) * a.seq:(first + b) * a.seq + a.seq + 1] for b in range(a.batch)])
        ids = torch.from_numpy(rows.astype(np.int64)).cuda()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(input_ids=ids[:, :-1]).logits
        loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        window_sum += loss.item()
        if (step + 1) % a.log_every == 0:
            losses.append({"step": step + 1, "loss": window_sum / a.log_every})
            window_sum = 0.0
    json.dump({"framework": "pytorch " + torch.__version__ + " eager bf16", "losses": losses}, open(a.json, "w"))
    for r in losses:
        print(f"step {r['step']}: {r['loss']:.4f}")


def compare(a):
    torch_losses = {r["step"]: r["loss"] for r in json.load(open(a.torch_json))["losses"]}
    genesis_losses = {}
    for line in open(a.metrics):
        r = json.loads(line)
        if "loss" in r and "step" in r and r.get("split", "train") == "train" and "eval" not in r:
            genesis_losses[r["step"]] = r["loss"]
    steps = sorted(set(torch_losses) & set(genesis_losses))
    if not steps:
        sys.exit("no common logged steps")
    worst = 0.0
    for s in steps:
        rel = abs(genesis_losses[s] - torch_losses[s]) / abs(torch_losses[s])
        worst = max(worst, rel)
        print(f"step {s:4d}: genesis {genesis_losses[s]:.4f}  pytorch {torch_losses[s]:.4f}  rel {rel:.2e}")
    print(f"largest relative difference {worst:.2e} over {len(steps)} logged steps (tolerance {a.tolerance})")
    sys.exit(0 if worst <= a.tolerance else 1)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pi = sub.add_parser("init")
    pi.add_argument("dir")
    pi.add_argument("--seed", type=int, default=0)
    pt = sub.add_parser("train")
    pt.add_argument("dir")
    pt.add_argument("shard")
    pt.add_argument("--json", required=True)
    pt.add_argument("--steps", type=int, default=200)
    pt.add_argument("--batch", type=int, default=16)
    pt.add_argument("--seq", type=int, default=1024)
    pt.add_argument("--lr", type=float, default=6e-4)
    pt.add_argument("--beta1", type=float, default=0.9)
    pt.add_argument("--beta2", type=float, default=0.95)
    pt.add_argument("--eps", type=float, default=1e-8)
    pt.add_argument("--weight-decay", type=float, default=0.1)
    pt.add_argument("--no-decay", nargs="*", default=["bias", "ln_", "wpe"])
    pt.add_argument("--warmup", type=int, default=50)
    pt.add_argument("--warmup-start-factor", type=float, default=0.0)
    pt.add_argument("--min-lr-factor", type=float, default=0.1)
    pt.add_argument("--clip", type=float, default=1.0)
    pt.add_argument("--log-every", type=int, default=10)
    pc = sub.add_parser("compare")
    pc.add_argument("torch_json")
    pc.add_argument("metrics")
    pc.add_argument("--tolerance", type=float, default=0.01)
    a = p.parse_args()
    {"init": init, "train": train, "compare": compare}[a.command](a)


if __name__ == "__main__":
    main()
