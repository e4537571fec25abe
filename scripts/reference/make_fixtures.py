#!/usr/bin/env python3
"""Parity fixtures for genesis's language models (tests/test_models.cpp).

Builds tiny random-weight GPT-2, Llama, Qwen2 and Qwen3 models with `transformers`, saves each
as a Hugging Face directory under tests/fixtures/<name>/ (config.json + model.safetensors), and
beside it reference.safetensors holding, for fixed input ids:

  input_ids [2, 11] i64          logits [2, 11, vocab] f32        loss [1] f32
  grad.<parameter name>          the gradient of every parameter after loss.backward()
  adamw_losses [5] f64           the loss before each of 5 torch.optim.AdamW steps
  prompt_ids [1, 5] i64          generated_ids [1, 32] i64: greedy `generate` continuation

The loss is the mean next-token cross-entropy with labels = input ids (position t predicts
token t + 1), as transformers computes it. Runs on the CPU in float32, deterministic for a
given torch/transformers version. Usage (where torch + transformers are installed):

    python3 scripts/reference/make_fixtures.py [--out tests/fixtures]
"""
import argparse
import inspect
import json
import pathlib
import sys

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM

VOCAB = 96
HIDDEN = 32
LAYERS = 2
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 64
POSITIONS = 64
BATCH, SEQ = 2, 11
PROMPT_LEN, NEW_TOKENS = 5, 32
ADAMW = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
ADAMW_STEPS = 5
# No bos/eos ids: greedy generation must run all NEW_TOKENS steps without special handling.
SPECIAL = dict(bos_token_id=None, eos_token_id=None, pad_token_id=None)


def with_rope_theta(config_class, kwargs, theta):
    """Sets rope_theta the way this transformers version spells it."""
    params = inspect.signature(config_class.__init__).parameters
    if "rope_theta" in params:
        kwargs["rope_theta"] = theta
    elif "rope_parameters" in params:
        kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": theta}
    else:
        kwargs["rope_theta"] = theta
    return kwargs


def gpt2_config():
    return transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=POSITIONS, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
        activation_function="gelu_new", resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        layer_norm_epsilon=1e-5, **SPECIAL)


def llama_config():
    kwargs = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                  max_position_embeddings=POSITIONS, rms_norm_eps=1e-6, tie_word_embeddings=False,
                  attention_bias=False, hidden_act="silu", **SPECIAL)
    return transformers.LlamaConfig(**with_rope_theta(transformers.LlamaConfig, kwargs, 10000.0))


def qwen2_config():
    # Qwen2 always has q/k/v biases; tied embeddings exercise the tied decoder head.
    kwargs = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                  max_position_embeddings=POSITIONS, rms_norm_eps=1e-6, tie_word_embeddings=True,
                  use_sliding_window=False, hidden_act="silu", **SPECIAL)
    return transformers.Qwen2Config(**with_rope_theta(transformers.Qwen2Config, kwargs, 1000.0))


def qwen3_config():
    # head_dim 16 != hidden / heads, so q/k/v/o shapes follow head_dim; q/k RMSNorm per head.
    kwargs = dict(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=INTERMEDIATE,
                  num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
                  head_dim=16, max_position_embeddings=POSITIONS, rms_norm_eps=1e-6,
                  tie_word_embeddings=False, attention_bias=False, use_sliding_window=False,
                  hidden_act="silu", **SPECIAL)
    return transformers.Qwen3Config(**with_rope_theta(transformers.Qwen3Config, kwargs, 1000000.0))


MODELS = {"gpt2": (gpt2_config, 1), "llama": (llama_config, 2), "qwen2": (qwen2_config, 3),
          "qwen3": (qwen3_config, 4)}


def build(config, seed):
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="eager").float()
    # Larger-than-default weights spread the logits, so greedy choices are far from ties.
    with torch.no_grad():
        for name, p in model.named_parameters():
            is_norm = name.endswith("norm.weight") or ".ln_" in name or "ln_f." in name
            if is_norm and name.endswith(".weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() == 1:
                p.copy_(0.1 * torch.randn_like(p))
            else:
                p.copy_(0.2 * torch.randn_like(p))
    if getattr(model, "generation_config", None) is not None:
        model.generation_config.eos_token_id = None
        model.generation_config.bos_token_id = None
        model.generation_config.pad_token_id = None
    model.train()
    return model


def lm_loss(model, ids):
    logits = model(input_ids=ids).logits
    loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))
    return logits, loss


def greedy_by_hand(model, prompt):
    ids = prompt
    smallest_gap = float("inf")
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            last = model(input_ids=ids).logits[:, -1]
            top2 = last.topk(2, dim=-1).values
            smallest_gap = min(smallest_gap, float((top2[:, 0] - top2[:, 1]).min()))
            ids = torch.cat([ids, last.argmax(-1, keepdim=True)], dim=1)
    return ids[:, prompt.size(1):], smallest_gap


def greedy_generate(model, prompt, name):
    by_hand, gap = greedy_by_hand(model, prompt)
    if gap < 1e-3:
        print(f"warning: {name}: greedy top-2 logit gap {gap:.2e} is small", file=sys.stderr)
    try:
        with torch.no_grad():
            out = model.generate(input_ids=prompt, attention_mask=torch.ones_like(prompt),
                                 max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1, pad_token_id=0)
        generated = out[:, prompt.size(1):]
    except Exception as error:  # noqa: BLE001 - any generate() incompatibility falls back to the loop
        print(f"warning: {name}: generate() failed ({error}); using the greedy loop", file=sys.stderr)
        return by_hand
    if generated.shape != by_hand.shape or not torch.equal(generated, by_hand):
        print(f"warning: {name}: generate() differs from the greedy loop; keeping generate()'s ids",
              file=sys.stderr)
    return generated


def make_fixture(name, make_config, seed, out_root):
    out = out_root / name
    out.mkdir(parents=True, exist_ok=True)
    model = build(make_config(), seed)
    save_options = {}
    if "safe_serialization" in inspect.signature(model.save_pretrained).parameters:
        save_options["safe_serialization"] = True
    model.save_pretrained(out, **save_options)
    if not (out / "model.safetensors").exists():
        sys.exit(f"{name}: save_pretrained wrote no model.safetensors in {out}")

    generator = torch.Generator().manual_seed(1000 + seed)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=generator, dtype=torch.int64)
    logits, loss = lm_loss(model, ids)
    try:
        hf_loss = model(input_ids=ids, labels=ids).loss
        if abs(float(hf_loss) - float(loss)) > 1e-5:
            print(f"warning: {name}: transformers' loss {float(hf_loss)} != {float(loss)}", file=sys.stderr)
    except Exception as error:  # noqa: BLE001 - the explicit loss above is the reference
        print(f"warning: {name}: labels= loss unavailable ({error})", file=sys.stderr)
    model.zero_grad(set_to_none=True)
    loss.backward()
    reference = {
        "input_ids": ids.contiguous(),
        "logits": logits.detach().float().contiguous(),
        "loss": loss.detach().float().reshape(1).contiguous(),
    }
    for pname, p in model.named_parameters():
        reference["grad." + pname] = p.grad.detach().float().clone().contiguous()

    prompt = ids[:1, :PROMPT_LEN].clone()
    reference["prompt_ids"] = prompt.contiguous()
    reference["generated_ids"] = greedy_generate(model, prompt, name).to(torch.int64).contiguous()

    model.zero_grad(set_to_none=True)
    optimizer = torch.optim.AdamW(model.parameters(), foreach=False, **ADAMW)
    losses = []
    for _ in range(ADAMW_STEPS):
        optimizer.zero_grad(set_to_none=True)
        _, step_loss = lm_loss(model, ids)
        losses.append(float(step_loss))
        step_loss.backward()
        optimizer.step()
    reference["adamw_losses"] = torch.tensor(losses, dtype=torch.float64)

    metadata = {"torch": torch.__version__, "transformers": transformers.__version__,
                "adamw": json.dumps(ADAMW)}
    save_file(reference, str(out / "reference.safetensors"), metadata=metadata)
    size = sum(f.stat().st_size for f in out.iterdir() if f.is_file())
    print(f"{name}: loss {float(loss):.6f}, adamw {['%.6f' % x for x in losses]}, {size} bytes in {out}")
    return size


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures"))
    args = parser.parse_args()
    torch.set_default_dtype(torch.float32)
    out_root = pathlib.Path(args.out)
    total = sum(make_fixture(name, make_config, seed, out_root) for name, (make_config, seed) in MODELS.items())
    print(f"total {total} bytes (torch {torch.__version__}, transformers {transformers.__version__})")


if __name__ == "__main__":
    main()
