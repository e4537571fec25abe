#!/usr/bin/env python3
"""Tokenizer parity fixture for genesis's tokenizer.json loader (tests/test_tokenizer.cpp).

Trains a small byte-level BPE with the Hugging Face `tokenizers` library, set up the way
Qwen2's tokenizer.json is: a Split pre-tokenizer with Qwen2's regex (isolated), then
ByteLevel without its own regex, ByteLevel decoder, and added special tokens. Writes
tests/fixtures/tokenizer_bpe/tokenizer.json and expected.json: a list of
{"text": ..., "ids": [...]} pairs that genesis must reproduce exactly.

The training corpus is the source text of a few Python standard-library modules (the GPU
host has no other text and no network); the fixture is generated once and committed.
Usage (where `tokenizers` is installed): python3 scripts/reference/make_tokenizer_fixture.py
"""
import argparse
import inspect
import json
import pathlib
import textwrap

import tokenizers
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

# Qwen2's pre-tokenization pattern (contractions, letters, single digits, punctuation runs,
# newlines, trailing spaces).
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
VOCAB_SIZE = 700

SAMPLES = [
    "Hello, world!",
    "Call me Ishmael. Some years ago—never mind how long precisely—having little or no money in my purse,",
    "  leading spaces, trailing spaces   ",
    "tabs\tand\nnewlines\r\n\r\nand blank lines\n\n\n",
    "numbers 1234567 and 3.14159, dates 2026-11-22",
    "contractions: I'm, you're, it's, we'll, they'd, I've, DON'T, She'S",
    "unicode: café naïve Zürich Ελληνικά русский 中文字符 日本語 한국어",
    "emoji: 👋🏽 🚀✨ and a ZWJ family 👨‍👩‍👧",
    "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|><|endoftext|>",
    "code: def f(x):\n    return x ** 2  # square\n",
    "punctuation!!! ??? ... --- ((brackets)) [[list]] {{dict}}",
    "",
    " ",
    "a",
]


def corpus():
    import collections, difflib, functools, json as json_module, textwrap as textwrap_module  # noqa: E401
    texts = [inspect.getsource(m) for m in (collections, difflib, functools, json_module, textwrap_module)]
    texts += SAMPLES[:3]
    return texts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parents[2] / "tests" / "fixtures"
                                             / "tokenizer_bpe"))
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB_SIZE, special_tokens=SPECIAL_TOKENS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(corpus(), trainer)
    tokenizer.save(str(out / "tokenizer.json"))

    expected = []
    for text in SAMPLES:
        ids = tokenizer.encode(text, add_special_tokens=False).ids
        decoded = tokenizer.decode(ids, skip_special_tokens=False)
        if decoded != text:
            print(f"note: decode does not round-trip {text!r}: {decoded!r}")
        expected.append({"text": text, "ids": ids})
    (out / "expected.json").write_text(json.dumps({"tokenizers": tokenizers.__version__, "cases": expected},
                                                  ensure_ascii=False, indent=1) + "\n")
    print(textwrap.dedent(f"""\
        wrote {out}/tokenizer.json ({(out / 'tokenizer.json').stat().st_size} bytes, vocab {tokenizer.get_vocab_size()})
        and {len(expected)} cases to {out}/expected.json (tokenizers {tokenizers.__version__})"""))


if __name__ == "__main__":
    main()
