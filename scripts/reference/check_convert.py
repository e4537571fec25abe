#!/usr/bin/env python3
"""Proof that `genesis convert` output is read by transformers with the same numbers (docs/convert.md).

For each (converted, original) pair of Hugging Face directories:
  * both load with AutoModelForCausalLM.from_pretrained with no missing, unexpected or mismatched
    weights (from output_loading_info and from the transformers log, which is captured);
  * f32: every parameter is bit-identical and the logits on fixed ids agree (max-abs <= 1e-4);
    bf16/f16 exports: every parameter equals the original's round-to-nearest-even cast (torch's
    .to(), which rounds to nearest even) and the logits agree within the half-precision tolerance;
  * greedy generations (32 tokens) are identical (f32);
  * when the converted directory holds tokenizer files, AutoTokenizer loads them and encodes a
    fixed text as the original's tokenizer does (or round-trips it when the original has none).
Prints one verdict line per model and exits 1 when any check fails.

Usage (on a host with torch + transformers; the genesis binary built there):
    # HF -> genesis -> HF round trips of the committed fixtures, made by this script:
    python3 scripts/reference/check_convert.py --genesis build/bin/genesis tests/fixtures/{gpt2,llama,qwen2,qwen3}
    # ... and their bf16 exports:
    python3 scripts/reference/check_convert.py --genesis build/bin/genesis --dtype bf16 tests/fixtures/qwen2
    # directories converted elsewhere:
    python3 scripts/reference/check_convert.py --pair CONVERTED_DIR ORIGINAL_DIR
"""
import argparse
import logging
import pathlib
import subprocess
import sys
import tempfile
import warnings

import torch
import transformers
from transformers import AutoModelForCausalLM, AutoTokenizer

LOGIT_ATOL_F32 = 1e-4
# Half-precision logits: relative to the largest logit (bf16 keeps 8 significant bits).
LOGIT_RTOL_HALF = {"bf16": 3e-2, "f16": 5e-3}
NEW_TOKENS = 32
TEXT = "Call me Ishmael. Some years ago\u2014never mind how long precisely\u2014having little money."
WEIGHT_WARNINGS = ("not initialized", "newly initialized", "not used", "missing", "unexpected", "mismatch")
TORCH_DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


class CapturedLog(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def load(path, dtype):
    """The model and every problem transformers reported while loading it."""
    capture = CapturedLog()
    logger = logging.getLogger("transformers")
    logger.addHandler(capture)
    transformers.utils.logging.set_verbosity_warning()
    dtype_key = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
    try:
        with warnings.catch_warnings(record=True) as python_warnings:
            warnings.simplefilter("always")
            model, info = AutoModelForCausalLM.from_pretrained(
                path, output_loading_info=True, **{dtype_key: dtype})
    finally:
        logger.removeHandler(capture)
    capture.messages += [str(w.message) for w in python_warnings]
    problems = [f"{key}: {info[key]}" for key in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs")
                if info.get(key)]
    problems += [m for m in capture.messages if any(w in m.lower() for w in WEIGHT_WARNINGS)]
    others = [m for m in capture.messages if m not in problems]
    return model.eval(), problems, others


def fixed_ids(vocab_size):
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, vocab_size, (2, 11), generator=generator)


def check_tokenizer(converted, original):
    files = ("tokenizer.json", "vocab.json")
    if not any((converted / f).exists() for f in files):
        return None
    tokenizer = AutoTokenizer.from_pretrained(converted)
    ids = tokenizer(TEXT)["input_ids"]
    if any((original / f).exists() for f in files):
        reference = AutoTokenizer.from_pretrained(original)(TEXT)["input_ids"]
        return None if ids == reference else f"tokenizer ids differ: {ids[:8]}... vs {reference[:8]}..."
    decoded = tokenizer.decode(ids)
    return None if decoded == TEXT else f"tokenizer does not round-trip: {decoded!r}"


def check_pair(converted, original, dtype):
    """Returns (ok, details)."""
    failures, notes = [], []
    new, new_problems, new_other = load(converted, torch.float32)
    old, old_problems, _ = load(original, torch.float32)
    failures += [f"converted: {p}" for p in new_problems] + [f"original: {p}" for p in old_problems]
    notes += [f"warning: {m}" for m in new_other]

    new_params, old_params = dict(new.named_parameters()), dict(old.named_parameters())
    if new_params.keys() != old_params.keys():
        failures.append(f"parameter names differ: {sorted(new_params.keys() ^ old_params.keys())[:6]}")
    else:
        cast = TORCH_DTYPES[dtype]
        for name, value in old_params.items():
            expected = value.detach().to(cast).to(torch.float32)
            if not torch.equal(new_params[name].detach(), expected):
                failures.append(f"parameter {name} is not the {dtype} value of the original")
                break

    ids = fixed_ids(old.config.vocab_size)
    with torch.no_grad():
        new_logits, old_logits = new(ids).logits, old(ids).logits
    diff = (new_logits - old_logits).abs().max().item()
    limit = LOGIT_ATOL_F32 if dtype == "f32" else LOGIT_RTOL_HALF[dtype] * old_logits.abs().max().item()
    notes.append(f"logits max-abs {diff:.3g} (limit {limit:.3g})")
    if not diff <= limit:
        failures.append(f"logits differ by {diff:.3g} > {limit:.3g}")

    if dtype == "f32":
        prompt = ids[:1, :5]
        settings = dict(attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS, do_sample=False,
                        pad_token_id=0)
        with torch.no_grad():
            a = new.generate(prompt, **settings)[0, 5:].tolist()
            b = old.generate(prompt, **settings)[0, 5:].tolist()
        notes.append(f"greedy {NEW_TOKENS} tokens {'identical' if a == b else 'DIFFER'}")
        if a != b:
            failures.append(f"greedy generations differ: {a[:8]}... vs {b[:8]}...")

    problem = check_tokenizer(converted, original)
    if problem:
        failures.append(problem)
    return not failures, failures or notes


def round_trip(genesis, original, work, dtype):
    """original -> genesis checkpoint -> HF directory, with `genesis convert`."""
    checkpoint, converted = work / f"{original.name}_genesis", work / f"{original.name}_hf_{dtype}"
    subprocess.run([genesis, "convert", str(original), str(checkpoint), "--to", "genesis"], check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([genesis, "convert", str(checkpoint), str(converted), "--to", "hf", "--dtype", dtype],
                   check=True, stdout=subprocess.DEVNULL)
    return converted


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("originals", nargs="*", type=pathlib.Path, help="HF directories to round-trip with --genesis")
    parser.add_argument("--genesis", help="the genesis binary that converts the originals")
    parser.add_argument("--pair", nargs=2, action="append", default=[], type=pathlib.Path,
                        metavar=("CONVERTED", "ORIGINAL"), help="an already converted directory and its original")
    parser.add_argument("--dtype", choices=sorted(TORCH_DTYPES), default="f32", help="the export's dtype")
    args = parser.parse_args()
    if args.originals and not args.genesis:
        parser.error("round-tripping ORIGINALS needs --genesis PATH")
    if not args.originals and not args.pair:
        parser.error("nothing to check: give ORIGINALS with --genesis, or --pair CONVERTED ORIGINAL")
    torch.manual_seed(0)
    all_ok = True
    with tempfile.TemporaryDirectory(prefix="check_convert_") as tmp:
        pairs = [(round_trip(args.genesis, o, pathlib.Path(tmp), args.dtype), o) for o in args.originals]
        for converted, original in pairs + [tuple(p) for p in args.pair]:
            try:
                ok, details = check_pair(converted, original, args.dtype)
            except Exception as error:  # one model's crash is that model's verdict
                ok, details = False, [f"{type(error).__name__}: {error}"]
            all_ok &= ok
            print(f"{'PASS' if ok else 'FAIL'} {original} ({args.dtype}, transformers {transformers.__version__}): "
                  + "; ".join(details))
    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
