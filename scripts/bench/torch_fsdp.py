#!/usr/bin/env python3
"""PyTorch side of the sharded-training benchmark (genesis's dist.zero = 3): a model of
scripts/bench/torch_train_lm.py (transformers' Llama or Qwen2 shapes) under FSDP2 as torchtitan
applies it: `fully_shard` on every decoder layer and then on the whole model, bf16 parameters and
f32 gradient reduction (MixedPrecisionPolicy), optional activation checkpointing of every layer
and torch.compile of every layer, fused AdamW, gradient clipping, on random token windows. Run it
under torchrun, one process per GPU; rank 0 prints one JSON object: the median step (CUDA
events), tokens/s over all ranks and per GPU, and the peak memory.

  torchrun --nproc-per-node 4 scripts/bench/torch_fsdp.py --model llama3_8b --batch 2 --seq 2048 --ac full --compile

First runs (H200, one rank, 2026-11-29), qwen2_0.5b B4 T1024 --compile: 13.6k tokens/s with
--ac full before the layers stopped recompiling (use_cache=False, a larger cache_size_limit), 23.7k
with --ac none after (173 ms a step for about 25 ms of GEMM work: at this size the step is bound by
the host, FSDP2's hooks at one rank). Not yet run at the 8B shape on 2 or 4 GPUs, where it is meant
to serve as the bar.
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dist_timing import time_steps  # noqa: E402
from torch_train_lm import MODELS, build  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=sorted(MODELS), default="llama3_8b")
    p.add_argument("--batch", type=int, default=2, help="windows per GPU")
    p.add_argument("--seq", type=int, default=2048)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--compile", action="store_true", help="torch.compile each decoder layer (torchtitan's way)")
    p.add_argument("--ac", choices=["none", "full"], default="none",
                   help="activation checkpointing of every decoder layer")
    p.add_argument("--vocab", type=int, default=0, help="override the vocabulary size")
    a = p.parse_args()
    # Every layer is its own compiled module; their guards differ (the layer index), so the
    # default of 8 compiled versions per code object would send most layers back to eager.
    torch._dynamo.config.cache_size_limit = 256
    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    dev = torch.device("cuda", local)
    # Built on the meta device and materialized shard by shard, as torchtitan does: no rank ever
    # holds the whole f32 model.
    with torch.device("meta"):
        model, vocab = build(a.model, True, a.vocab)
    layers = model.model.layers
    for i, layer in enumerate(layers):
        if a.ac == "full":
            from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
            layer = checkpoint_wrapper(layer, preserve_rng_state=False)
        if a.compile:
            layer = torch.compile(layer)
        layers[i] = layer
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for i, layer in enumerate(layers):
        # The last layer stays gathered for the backward, which starts with it (torchtitan).
        fully_shard(layer, mp_policy=mp, reshard_after_forward=i < len(layers) - 1)
    fully_shard(model, mp_policy=mp)
    model.to_empty(device=dev)
    with torch.no_grad():
        for prm in model.parameters():
            prm.normal_(0.0, 0.02)
        # Buffers computed at construction (RoPE's inverse frequencies) are empty after to_empty.
        for m in model.modules():
            if hasattr(m, "rope_init_fn") and hasattr(m, "inv_freq"):
                inv_freq, m.attention_scaling = m.rope_init_fn(m.config, dev)
                m.inv_freq.copy_(inv_freq)
                m.original_inv_freq = m.inv_freq
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    gen = torch.Generator(device=dev).manual_seed(rank)
    data_vocab = MODELS[a.model]["vocab_size"] if not a.vocab else a.vocab

    def step():
        ids = torch.randint(0, data_vocab, (a.batch, a.seq + 1), device=dev, generator=gen)
        logits = model(input_ids=ids[:, :-1], use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), ids[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    ms, peak, loss = time_steps(step, a.warmup, a.steps, dev)
    if rank == 0:
        tokens = world * a.batch * a.seq / (ms / 1e3)
        print(json.dumps({
            "framework": f"pytorch {torch.__version__} FSDP2" + (" compile" if a.compile else " eager")
                         + f" ac {a.ac}",
            "model": a.model, "vocab": vocab, "world_size": world, "batch_per_gpu": a.batch, "seq": a.seq,
            "ms_per_step": round(ms, 2), "tokens_per_s": round(tokens), "tokens_per_s_per_gpu": round(tokens / world),
            "peak_memory_gib": round(peak, 2), "final_loss": round(loss.item(), 4),
            "gpu": torch.cuda.get_device_name()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
