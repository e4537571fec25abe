#!/usr/bin/env python3
"""PyTorch side of the language-model training benchmark: the model of a genesis LM recipe
(GPT-2 as a compact nanoGPT-style module, the fastest eager PyTorch form of it, or
transformers' GPT-2 with --hf; Qwen2 through transformers), trained on
random token windows with AdamW, bf16 autocast (or f32 with TF32) and SDPA attention; prints
one JSON object: tokens/s and ms per step (medians over the timed steps) and the peak of
torch.cuda.max_memory_allocated. With --json FILE it also writes the schema of
`genesis bench train` (genesis.bench.train/1: the step's median, MFU, peak memory and its
forward / backward / optimizer split from CUDA events, the steps run back to back), so
`genesis bench compare` prints the ratio against genesis's result.

  python3 scripts/bench/torch_train_lm.py --model gpt2 --batch 16 --seq 1024 --dtype bf16
  python3 scripts/bench/torch_train_lm.py --model qwen2_0.5b --batch 8 --seq 1024 [--compile]
  python3 scripts/bench/torch_train_lm.py --model qwen2_0.5b --batch 4 --seq 2048 --compile --packed 64:2048
  --vocab 50304 pads GPT-2's vocabulary as nanoGPT does for speed (genesis pads inside its fused
  head instead). With --compile the model and the loss are compiled together, so Inductor may
  fuse the cross-entropy into the head (its fastest form).

--packed MIN:MAX is the supervised fine-tuning step of `genesis bench train --packed`: each row
packs documents of lengths uniform in [MIN, MAX] (seeded, the last one cut to fit), positions
restart at each document, attention stays inside it (FlexAttention with a causal document
mask_mod; Qwen2 only), and a document's last position has no target (-100). The block mask is
built from the batch's document ids inside every timed step (genesis derives its positions and
kernel bounds from doc_start inside its step too); --mask-outside builds each cycled batch's
mask once before timing instead. FlexAttention is fast only compiled: use it with --compile.
"""
import argparse
import json
import statistics
import sys

import torch

MODELS = {
    # the shapes of recipes/gpt2_124m.toml and recipes/qwen2_0.5b.toml
    "gpt2": dict(kind="gpt2", vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12),
    "qwen2_0.5b": dict(kind="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864,
                       num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                       max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1e6,
                       tie_word_embeddings=True),
    # the LoRA targets' shapes (TARGETS.md): Qwen2.5-1.5B and Llama-3-8B
    "qwen2.5_1.5b": dict(kind="qwen2", vocab_size=151936, hidden_size=1536, intermediate_size=8960,
                         num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                         max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1e6,
                         tie_word_embeddings=True),
    "llama3_8b": dict(kind="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=8,
                      max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0,
                      tie_word_embeddings=False),
}


class Gpt2Block(torch.nn.Module):
    def __init__(self, d, heads, dropout):
        super().__init__()
        self.heads, self.dropout = heads, dropout
        self.resid_drop = torch.nn.Dropout(dropout)
        self.ln_1, self.ln_2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.c_attn, self.c_proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.c_fc, self.mlp_proj = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, dropout_p=self.dropout if self.training else 0.0)
        x = x + self.resid_drop(self.c_proj(y.transpose(1, 2).reshape(b, t, d)))
        return x + self.resid_drop(
            self.mlp_proj(torch.nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")))


class Gpt2(torch.nn.Module):
    """GPT-2 as nanoGPT writes it (tied head, SDPA flash attention; dropout on the attention
    probabilities, the residual branches and the embeddings)."""

    def __init__(self, vocab_size, n_positions, n_embd, n_layer, n_head, dropout=0.0):
        super().__init__()
        self.embd_drop = torch.nn.Dropout(dropout)
        self.wte, self.wpe = torch.nn.Embedding(vocab_size, n_embd), torch.nn.Embedding(n_positions, n_embd)
        self.h = torch.nn.ModuleList(Gpt2Block(n_embd, n_head, dropout) for _ in range(n_layer))
        self.ln_f = torch.nn.LayerNorm(n_embd)
        # nanoGPT's initialization (as genesis's: N(0, 0.02), residual projections scaled).
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                torch.nn.init.zeros_(p)
            elif p.dim() > 1:
                std = 0.02 / (2 * n_layer) ** 0.5 if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                torch.nn.init.normal_(p, 0.0, std)

    def forward(self, input_ids):
        pos = torch.arange(input_ids.size(1), device=input_ids.device)
        x = self.embd_drop(self.wte(input_ids) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


def build(name, hf, vocab, dropout=0.0):
    import transformers
    cfg = dict(MODELS[name])
    if vocab:
        cfg["vocab_size"] = vocab
    kind = cfg.pop("kind")
    if kind == "gpt2" and not hf:
        return Gpt2(**cfg, dropout=dropout), cfg["vocab_size"]
    if kind == "gpt2":
        config = transformers.GPT2Config(**cfg, resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                                         activation_function="gelu_new")
        model = transformers.GPT2LMHeadModel(config)
    elif kind == "llama":
        config = transformers.LlamaConfig(**cfg, attention_dropout=dropout)
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.Qwen2Config(**cfg, attention_dropout=dropout)
        model = transformers.Qwen2ForCausalLM(config)
    model.config._attn_implementation = "sdpa"
    return model, cfg["vocab_size"]


def packed_layouts(count, batch, seq, lengths, seed):
    """`count` batches of rows packed with documents of lengths uniform in [MIN, MAX] (the last
    one cut at the row's end), on the host: each position's document index and place in its
    document (position_ids), which targets count (not a document's last position), and the
    mean documents per row."""
    state = seed
    layouts, documents = [], 0

    def draw():
        # SplitMix64, as genesis bench train --packed draws: both sides time the same packing.
        nonlocal state
        mask = (1 << 64) - 1
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return lengths[0] + (z ^ (z >> 31)) % (lengths[1] - lengths[0] + 1)

    for _ in range(count):
        doc = torch.empty(batch, seq, dtype=torch.int32)
        pos = torch.empty(batch, seq, dtype=torch.int64)
        counted = torch.ones(batch, seq, dtype=torch.bool)
        for r in range(batch):
            at, d = 0, 0
            while at < seq:
                n = min(draw(), seq - at)
                doc[r, at:at + n] = d
                pos[r, at:at + n] = torch.arange(n)
                counted[r, at + n - 1] = False
                at, d = at + n, d + 1
            documents += d
        layouts.append((doc, pos, counted))
    return layouts, documents / (count * batch)


def document_causal_mask(doc):
    """FlexAttention mask_mod: causal, and only keys of the query's own document (doc [B, T])."""
    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (doc[b, q_idx] == doc[b, kv_idx])
    return mask_mod


def flex_document_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """--flex direct, for transformers' AttentionInterface: flex_attention under the batch's
    BlockMask (passed as attention_mask) with its native GQA. transformers' own "flex_attention"
    (the default) repeats K and V into every query head when the heads are not a power of two
    (Qwen2.5-0.5B has 14), which on an H200 was the faster of the two (71.1 against 73.5 ms a
    step at B4 T2048, 2026-11-28), so it is the PyTorch figure genesis is held to."""
    from torch.nn.attention.flex_attention import flex_attention
    out = flex_attention(query, key, value, block_mask=attention_mask, scale=scaling,
                         enable_gqa=query.size(1) != key.size(1))
    return out.transpose(1, 2).contiguous(), None


def peft_version():
    import peft
    return peft.__version__


def compiled_graphs():
    """Graphs Dynamo has compiled so far: a count that grows during the timed steps means a guard
    failed and a step recompiled (a new block mask must not cost a compile)."""
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


def quantize_blocks_nf4(model):
    """Every nn.Linear but the output head becomes a bitsandbytes Linear4bit (NF4, double
    quantization, bf16 compute); the weights are quantized when the model moves to the GPU."""
    import bitsandbytes as bnb
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if not isinstance(child, torch.nn.Linear) or child_name == "lm_head":
                continue
            q = bnb.nn.Linear4bit(child.in_features, child.out_features, bias=child.bias is not None,
                                  compute_dtype=torch.bfloat16, compress_statistics=True, quant_type="nf4")
            q.weight = bnb.nn.Params4bit(child.weight.data, requires_grad=False, compress_statistics=True,
                                         quant_type="nf4")
            if child.bias is not None:
                q.bias = torch.nn.Parameter(child.bias.data, requires_grad=False)
            setattr(module, child_name, q)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=sorted(MODELS), default="gpt2")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--dtype", choices=["bf16", "f32"], default="bf16")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--compile", action="store_true")
    p.add_argument("--lora", type=int, default=0, metavar="R",
                   help="PEFT LoRA of rank R (alpha 2R, dropout 0) on every linear layer of the blocks, the base "
                        "frozen in bf16, AdamW on the adapters (f32)")
    p.add_argument("--qlora", action="store_true",
                   help="with --lora: the base's block linears in bitsandbytes' NF4 (double quantization, block 64, "
                        "bf16 compute), as QLoRA sets them up")
    p.add_argument("--grad-ckpt", action="store_true",
                   help="activation checkpointing of every decoder block (transformers' gradient_checkpointing_enable)")
    p.add_argument("--dropout", type=float, default=0.0,
                   help="GPT-2: attention, residual and embedding dropout; Qwen2: attention (a recipe's model.dropout)")
    p.add_argument("--hf", action="store_true", help="GPT-2 from transformers instead of the compact module")
    p.add_argument("--vocab", type=int, default=0, help="override the vocabulary size (nanoGPT: 50304)")
    p.add_argument("--json", default="", help="write a genesis.bench.train/1 result here")
    p.add_argument("--case-name", default="", help="the recipe's run.name, which names the case (as genesis does)")
    p.add_argument("--packed", default="", metavar="MIN:MAX",
                   help="rows packed with documents of MIN to MAX tokens, FlexAttention document masking (Qwen2)")
    p.add_argument("--mask-outside", action="store_true",
                   help="--packed: build each cycled batch's block mask once, outside the timed steps")
    p.add_argument("--flex", choices=["transformers", "direct"], default="transformers",
                   help="--packed: transformers' flex_attention, or flex_attention registered directly (native GQA)")
    a = p.parse_args()
    lengths = None
    if a.packed:
        try:
            lengths = tuple(int(v) for v in a.packed.split(":"))
        except ValueError:
            lengths = ()
        if len(lengths) != 2 or not 1 <= lengths[0] <= lengths[1]:
            p.error(f"--packed: expected MIN:MAX, document lengths with 1 <= MIN <= MAX (got '{a.packed}')")
        if MODELS[a.model]["kind"] != "qwen2":
            p.error("--packed: Qwen2 only (transformers' attention interface carries the block mask)")
        if not a.compile:
            print("note: FlexAttention without --compile runs its slow reference path", file=sys.stderr)
    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = torch.device("cuda")
    model, vocab = build(a.model, a.hf, a.vocab, a.dropout)
    if lengths and a.flex == "direct":
        import transformers
        transformers.AttentionInterface.register("flex_document", flex_document_attention)
        model.config._attn_implementation = "flex_document"
    elif lengths:
        model.config._attn_implementation = "flex_attention"
    if a.qlora and not a.lora:
        p.error("--qlora needs --lora R")
    if a.grad_ckpt:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if a.lora:
        import peft
        model.to(torch.bfloat16)
        if a.qlora:
            quantize_blocks_nf4(model)
        targets = ["c_attn", "c_proj", "c_fc"] if MODELS[a.model]["kind"] == "gpt2" else \
            ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
        model = peft.get_peft_model(model, peft.LoraConfig(r=a.lora, lora_alpha=2 * a.lora, lora_dropout=0.0,
                                                           target_modules=targets))  # adapters in f32
    model.to(dev).train()
    opt = torch.optim.AdamW([q for q in model.parameters() if q.requires_grad], lr=3e-4, betas=(0.9, 0.95),
                            weight_decay=0.1, fused=True)
    gen = torch.Generator(device=dev).manual_seed(0)
    data_vocab = MODELS[a.model]["vocab_size"]  # tokens stay in the real vocabulary

    # Mean over the counted targets (ignore_index -100): the sum over them divided by their
    # number, as genesis's step takes it.
    def compute_loss(inputs, targets, position_ids=None, block_mask=None):
        packing = {} if block_mask is None else dict(position_ids=position_ids, attention_mask=block_mask)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.dtype == "bf16"):
            out = model(input_ids=inputs, **packing)
            logits = out if torch.is_tensor(out) else out.logits
            return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)).float(),
                                                     targets.reshape(-1), ignore_index=-100)

    loss_fn = torch.compile(compute_loss) if a.compile else compute_loss

    # Packed: a few document layouts cycled, as genesis cycles its synthetic batches; the tokens
    # are drawn on the device each step, as the unpacked step draws them.
    layouts, docs_per_row, masks = [], 1.0, []
    if lengths:
        from torch.nn.attention.flex_attention import create_block_mask
        layouts, docs_per_row = packed_layouts(4, a.batch, a.seq, lengths, seed=0)
        layouts = [tuple(t.to(dev) for t in layout) for layout in layouts]

        # Compiled, the mask_mod is evaluated block by block instead of over a [B, T, T] tensor.
        make_mask = torch.compile(create_block_mask)

        def block_mask(doc):
            return make_mask(document_causal_mask(doc), B=a.batch, H=None, Q_LEN=a.seq, KV_LEN=a.seq, device=dev)

        if a.mask_outside:
            masks = [block_mask(doc) for doc, _, _ in layouts]
    step_index = 0

    def step(mark):
        nonlocal step_index
        ids = torch.randint(0, data_vocab, (a.batch, a.seq + 1), device=dev, generator=gen)
        inputs, targets = ids[:, :-1], ids[:, 1:]
        if lengths:
            i = step_index % len(layouts)
            doc, pos, counted = layouts[i]
            targets = targets.masked_fill(~counted, -100)
            loss = loss_fn(inputs, targets, pos, masks[i] if masks else block_mask(doc))
        else:
            loss = loss_fn(inputs, targets)
        step_index += 1
        mark("forward")
        loss.backward()
        mark("backward")
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        mark("optimizer")
        return loss

    for _ in range(a.warmup):
        step(lambda phase: None)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    graphs_before = compiled_graphs()
    # Events at the phase boundaries of back-to-back steps, read after the last one.
    marks = []

    def mark(phase):
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        marks.append((phase, e))

    mark("start")
    for _ in range(a.steps):
        loss = step(mark)
    torch.cuda.synchronize()
    recompiles = compiled_graphs() - graphs_before
    steps, phases, total, split = [], {"forward": [], "backward": [], "optimizer": []}, 0.0, {}
    for (_, before), (phase, after) in zip(marks, marks[1:]):
        ms = before.elapsed_time(after)
        total += ms
        split[phase] = split.get(phase, 0.0) + ms
        if phase == "optimizer":
            steps.append(total)
            for name in phases:
                phases[name].append(split.get(name, 0.0))
            total, split = 0.0, {}
    ms = statistics.median(steps)
    tokens_per_s = a.batch * a.seq / (ms / 1e3)
    framework = ("pytorch " + torch.__version__ + (" compile" if a.compile else " eager")
                 + (" transformers" if a.hf or a.model != "gpt2" else " nanogpt-style")
                 + (f" flex ({a.flex})" if lengths else "") + (f" peft {peft_version()} lora r{a.lora}" if a.lora else "")
                 + (" nf4" if a.qlora else "") + (" grad-ckpt" if a.grad_ckpt else ""))
    peak_gib = torch.cuda.max_memory_allocated() / 2**30
    packing = None
    if lengths:
        packing = {"min_doc_length": lengths[0], "max_doc_length": lengths[1], "mean_docs_per_row": docs_per_row,
                   "rows": len(layouts) * a.batch, "attention": "flex_attention " + a.flex,
                   "block_mask": "once per cycled batch, before timing" if a.mask_outside else "every step, timed"}
    print(json.dumps({
        "framework": framework, "model": a.model, "vocab": vocab, "batch": a.batch, "seq": a.seq, "dtype": a.dtype,
        "ms_per_step": round(ms, 2), "tokens_per_s": round(tokens_per_s),
        "peak_memory_gib": round(peak_gib, 2), "graphs_compiled_while_timed": recompiles, "packing": packing,
        "final_loss": round(loss.item(), 4), "gpu": torch.cuda.get_device_name()}))
    if a.json:
        # genesis's count (libgenesis/train/lm_metrics.cpp): 6 per matmul parameter (position
        # embeddings are lookups), 12 L width T for attention; H100 dense bf16 peak 989 TFLOP/s.
        cfg = MODELS[a.model]
        # A frozen weight needs no weight gradient: 4 instead of 6 per parameter (genesis counts so).
        matmul_params = sum(p.numel() * (1.0 if p.requires_grad else 4.0 / 6.0)
                            for n, p in model.named_parameters() if not n.endswith("wpe.weight"))
        layers = cfg.get("n_layer", cfg.get("num_hidden_layers"))
        width = cfg.get("n_embd", cfg.get("hidden_size"))
        flops_per_token = 6.0 * matmul_params + 12.0 * layers * width * a.seq
        name = torch.cuda.get_device_name()
        peak = 756e12 if "H100 PCIe" in name else 989e12 if ("H100" in name or "H200" in name) else 0.0
        ordered = sorted(steps)
        pick = lambda q: ordered[int(q * (len(ordered) - 1) + 0.5)]
        name_suffix = (f" packed {lengths[0]}:{lengths[1]}" if lengths else "") + (f" lora r{a.lora}" if a.lora else "")
        case = {"name": (a.case_name or a.model) + " train step" + name_suffix, "op": "train_step", "shapes": [[a.batch, a.seq]],
                "dtype": a.dtype, "status": "ok", "median_ms": ms, "p10_ms": pick(0.1), "p90_ms": pick(0.9),
                "reps": len(steps), "tokens_per_s": tokens_per_s,
                "mfu": tokens_per_s * flops_per_token / peak if peak else 0.0, "peak_memory_gib": peak_gib,
                "phases": {f"{k}_ms": statistics.median(v) for k, v in phases.items()},
                "final_loss": loss.item(), "vocab": vocab, "packing": packing,
                "graphs_compiled_while_timed": recompiles}
        with open(a.json, "w") as f:
            json.dump({"schema": "genesis.bench.train/1", "tool": framework, "device": "cuda:0",
                       "device_name": name, "model": a.model, "flops_per_token": flops_per_token,
                       "peak_flops_per_s": peak, "cases": [case]}, f, indent=2)


if __name__ == "__main__":
    main()
