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

bf16 autocast references (--autocast bf16). Leaves every existing file alone: loads each
existing directory tests/fixtures/<name>/ with AutoModelForCausalLM.from_pretrained (float32,
attn_implementation "sdpa"), reads input_ids from its reference.safetensors and writes only
tests/fixtures/<name>/reference_autocast_bf16.safetensors:

  logits [2, 11, vocab] f32      the forward under torch.autocast("cpu", dtype=torch.bfloat16),
                                 upcast to f32 (the model returns bf16 logits)
  loss [1] f32                   the loss above (same definition), computed under autocast
  adamw_losses [5] f64           the loss before each of 5 AdamW steps (same settings): forward
                                 and loss under autocast, backward and step outside it, no
                                 GradScaler (PyTorch AMP with bf16); parameters stay f32

"sdpa" because genesis's attention is one fused op (bf16 q/k/v under autocast, f32 scores and
softmax inside, bf16 output), which is what torch's CPU autocast does with
scaled_dot_product_attention (in its lower-precision list); "eager" would round the scores to
bf16 before the softmax. (torch's CPU autocast leaves norms and softmax in their input dtype,
unlike CUDA's; transformers' norms compute in f32 themselves and the residual stream stays f32,
as genesis's f32 policy for them gives.) One CPU thread, so the sums do not depend on the host's core count
(bf16 GEMMs may still differ in the last bit between CPU instruction sets). Usage:

    python3 scripts/reference/make_fixtures.py --autocast bf16 [--out tests/fixtures]
"""
import argparse
import inspect
import json
import math
import pathlib
import re
import sys

import torch
import torch.nn.functional as F
import transformers
from safetensors.torch import load_file, save_file
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


def warn_if_hf_loss_differs(name, model, ids, loss, tolerance, autocast_dtype=None):
    """Warns when transformers' own labels= loss is more than tolerance from lm_loss's."""
    what = "loss" if autocast_dtype is None else "autocast loss"
    try:
        with torch.autocast("cpu", dtype=autocast_dtype or torch.bfloat16, enabled=autocast_dtype is not None):
            hf_loss = model(input_ids=ids, labels=ids).loss
        if abs(float(hf_loss) - float(loss)) > tolerance:
            print(f"warning: {name}: transformers' {what} {float(hf_loss)} != {float(loss)}", file=sys.stderr)
    except Exception as error:  # noqa: BLE001 - the explicit loss is the reference
        print(f"warning: {name}: labels= loss unavailable ({error})", file=sys.stderr)


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
    warn_if_hf_loss_differs(name, model, ids, loss, 1e-5)
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


AUTOCAST_DTYPES = {"bf16": torch.bfloat16}
DROPOUT_KEYS = ("resid_pdrop", "embd_pdrop", "attn_pdrop", "attention_dropout")


def load_pretrained_f32(name, directory):
    """The fixture's Hugging Face directory in float32 with SDPA attention (see the docstring)."""
    version = tuple(int(part) for part in re.findall(r"\d+", transformers.__version__)[:2])
    dtype_key = "dtype" if version >= (4, 56) else "torch_dtype"  # renamed in transformers 4.56
    model = AutoModelForCausalLM.from_pretrained(str(directory), attn_implementation="sdpa",
                                                 **{dtype_key: torch.float32}).float()
    attn = getattr(model.config, "_attn_implementation", "sdpa")
    if attn != "sdpa":
        sys.exit(f"{name}: transformers chose attn_implementation {attn!r}, not 'sdpa'")
    for key in DROPOUT_KEYS:
        if float(getattr(model.config, key, 0.0) or 0.0) != 0.0:
            sys.exit(f"{name}: config {key} = {getattr(model.config, key)}: the reference needs no dropout")
    bad = [pname for pname, p in model.named_parameters() if p.dtype != torch.float32]
    if bad:
        sys.exit(f"{name}: parameters not float32 after loading: {bad[:3]}")
    return model


def relative_gaps(actual, expected):
    """(||a - e|| / ||e||, max |a - e| / max |e|) in float64."""
    delta = actual.double() - expected.double()
    return (float(delta.norm() / expected.double().norm().clamp_min(1e-30)),
            float(delta.abs().max() / expected.double().abs().max().clamp_min(1e-30)))


def make_autocast_reference(name, directory, dtype_name):
    """Writes directory/reference_autocast_<dtype_name>.safetensors; changes no other file."""
    low = AUTOCAST_DTYPES[dtype_name]
    reference_path = directory / "reference.safetensors"
    if not (directory / "config.json").exists() or not reference_path.exists():
        sys.exit(f"{name}: {directory} lacks config.json or reference.safetensors; make the f32 fixtures "
                 f"first (this script without --autocast)")
    f32_reference = load_file(str(reference_path))
    ids = f32_reference["input_ids"].to(torch.int64)
    if tuple(ids.shape) != (BATCH, SEQ):
        sys.exit(f"{name}: input_ids has shape {tuple(ids.shape)}, expected {(BATCH, SEQ)}")
    torch.manual_seed(0)  # nothing below draws random numbers; this only pins it down
    model = load_pretrained_f32(name, directory)
    model.train()  # as the f32 reference (no dropout, so the same as eval)
    vocab = int(model.config.vocab_size)

    # Without autocast the loaded model must reproduce the f32 reference: else this directory is
    # not the one that reference.safetensors was made from.
    with torch.no_grad():
        f32_logits, _ = lm_loss(model, ids)
    f32_gap = float((f32_logits.float() - f32_reference["logits"].float()).abs().max())
    if f32_gap > 1e-3:
        sys.exit(f"{name}: float32 logits differ from reference.safetensors by {f32_gap:.3e}")

    with torch.no_grad(), torch.autocast("cpu", dtype=low):
        logits, loss = lm_loss(model, ids)
    logits_dtype = str(logits.dtype).replace("torch.", "")
    logits = logits.float()
    if tuple(logits.shape) != (BATCH, SEQ, vocab):
        sys.exit(f"{name}: autocast logits have shape {tuple(logits.shape)}, expected {(BATCH, SEQ, vocab)}")
    if not bool(torch.isfinite(logits).all()) or not math.isfinite(float(loss)):
        sys.exit(f"{name}: non-finite logits or loss under autocast")
    if loss.dtype != torch.float32:
        sys.exit(f"{name}: the loss under autocast is {loss.dtype}, expected float32 (cross_entropy's policy)")
    norm_gap, max_gap = relative_gaps(logits, f32_logits)
    if max_gap == 0.0:
        sys.exit(f"{name}: autocast logits equal the float32 ones: autocast had no effect")
    if norm_gap > 5e-2:
        print(f"warning: {name}: autocast logits are {norm_gap:.3e} (relative norm) from float32", file=sys.stderr)
    with torch.no_grad():
        warn_if_hf_loss_differs(name, model, ids, loss, 1e-4, low)

    # PyTorch AMP with bf16: forward and loss under autocast, backward and step outside it, no
    # GradScaler; parameters, gradients and AdamW's states stay float32.
    model.zero_grad(set_to_none=True)
    optimizer = torch.optim.AdamW(model.parameters(), foreach=False, **ADAMW)
    losses = []
    for _ in range(ADAMW_STEPS):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=low):
            _, step_loss = lm_loss(model, ids)
        losses.append(float(step_loss.detach()))
        step_loss.backward()
        optimizer.step()
    bad = [pname for pname, p in model.named_parameters()
           if p.dtype != torch.float32 or p.grad is None or p.grad.dtype != torch.float32]
    if bad:
        sys.exit(f"{name}: parameters or gradients not float32 after the AdamW steps: {bad[:3]}")
    if not all(math.isfinite(x) for x in losses):
        sys.exit(f"{name}: non-finite AdamW losses under autocast: {losses}")
    if abs(losses[0] - float(loss)) > 1e-6:
        print(f"warning: {name}: the first AdamW loss {losses[0]} != the autocast loss {float(loss)}", file=sys.stderr)
    f32_losses = f32_reference["adamw_losses"].double().tolist()
    adamw_gap = max(abs(a - b) for a, b in zip(losses, f32_losses))

    reference = {
        "logits": logits.contiguous(),
        "loss": loss.detach().float().reshape(1).contiguous(),
        "adamw_losses": torch.tensor(losses, dtype=torch.float64),
    }
    metadata = {"torch": torch.__version__, "transformers": transformers.__version__, "adamw": json.dumps(ADAMW),
                "autocast": dtype_name, "attn_implementation": "sdpa", "threads": str(torch.get_num_threads()),
                "model_logits_dtype": logits_dtype}
    out = directory / f"reference_autocast_{dtype_name}.safetensors"
    save_file(reference, str(out), metadata=metadata)
    print(f"{name}: autocast {dtype_name}: loss {float(loss):.6f} (float32 {float(f32_reference['loss']):.6f}), "
          f"logits vs float32: relative norm {norm_gap:.3e}, max {max_gap:.3e} ({logits_dtype} logits); "
          f"adamw {['%.6f' % x for x in losses]} (max gap to float32 {adamw_gap:.3e}); {out}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures"))
    parser.add_argument("--autocast", choices=sorted(AUTOCAST_DTYPES),
                        help="only write reference_autocast_<dtype>.safetensors beside the existing fixtures")
    args = parser.parse_args()
    torch.set_default_dtype(torch.float32)
    out_root = pathlib.Path(args.out)
    if args.autocast:
        torch.set_num_threads(1)
        for name in MODELS:
            make_autocast_reference(name, out_root / name, args.autocast)
        print(f"torch {torch.__version__}, transformers {transformers.__version__}")
        return
    total = sum(make_fixture(name, make_config, seed, out_root) for name, (make_config, seed) in MODELS.items())
    print(f"total {total} bytes (torch {torch.__version__}, transformers {transformers.__version__})")


if __name__ == "__main__":
    main()
