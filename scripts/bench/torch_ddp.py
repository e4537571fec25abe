#!/usr/bin/env python3
"""PyTorch side of the data-parallel benchmark: the model of scripts/bench/torch_train_lm.py
(nanoGPT-style GPT-2 or transformers' Qwen2) wrapped in DistributedDataParallel (25 MB
buckets, gradients as bucket views), trained with bf16 autocast, fused AdamW and gradient
clipping on random token windows, optionally under torch.compile. Run it under torchrun, one
process per GPU; rank 0 prints one JSON object: the median step (CUDA events), tokens/s over all
ranks, per-GPU tokens/s and peak memory.

  torchrun --nproc-per-node 2 scripts/bench/torch_ddp.py --model gpt2 --vocab 50304 --batch 16 --compile
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dist_timing import time_steps  # noqa: E402
from torch_train_lm import MODELS, build  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=sorted(MODELS), default="gpt2")
    p.add_argument("--batch", type=int, default=16, help="windows per GPU")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--vocab", type=int, default=0, help="override the vocabulary size (nanoGPT: 50304)")
    p.add_argument("--bucket-mb", type=float, default=25.0)
    p.add_argument("--no-optimize-ddp", action="store_true",
                   help="compile the DDP model as one graph (torch._dynamo.config.optimize_ddp = False)")
    a = p.parse_args()
    if a.no_optimize_ddp:
        torch._dynamo.config.optimize_ddp = False
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda", local)
    model, vocab = build(a.model, False, a.vocab)
    model.to(dev).train()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local], bucket_cap_mb=a.bucket_mb,
                                                    gradient_as_bucket_view=True)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    gen = torch.Generator(device=dev).manual_seed(rank)
    data_vocab = MODELS[a.model]["vocab_size"]

    def compute_loss(ids):
        with torch.autocast("cuda", dtype=torch.bfloat16):
            out = ddp(input_ids=ids[:, :-1])
            logits = out if torch.is_tensor(out) else out.logits
            return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(),
                                                     ids[:, 1:].reshape(-1))

    loss_fn = torch.compile(compute_loss) if a.compile else compute_loss

    def step():
        ids = torch.randint(0, data_vocab, (a.batch, a.seq + 1), device=dev, generator=gen)
        loss = loss_fn(ids)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    ms, peak, loss = time_steps(step, a.warmup, a.steps, dev)
    if rank == 0:
        tokens = world * a.batch * a.seq / (ms / 1e3)
        print(json.dumps({
            "framework": f"pytorch {torch.__version__} DDP" + (" compile" if a.compile else " eager")
                         + (" optimize_ddp off" if a.no_optimize_ddp else ""),
            "model": a.model, "vocab": vocab, "world_size": world, "batch_per_gpu": a.batch, "seq": a.seq,
            "ms_per_step": round(ms, 2), "tokens_per_s": round(tokens), "tokens_per_s_per_gpu": round(tokens / world),
            "peak_memory_gib": round(peak, 2), "final_loss": round(loss.item(), 4),
            "gpu": torch.cuda.get_device_name()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
