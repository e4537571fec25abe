#!/usr/bin/env python3
"""Proves genesis's chat templates and SFT labels against transformers, on the GPU host (where
transformers is installed): for each real template of tests/fixtures/chat_templates/ (Qwen2.5,
Llama 3.1, Mistral, Gemma, Phi-3, SmolLM2) and multi-turn conversations with and without a
system prompt,
  ids       `genesis data preview --json` ids == tokenizer.apply_chat_template(conv, tokenize=True)
  prompt    the ids before the last assistant turn == apply_chat_template(conv[:-1],
            add_generation_prompt=True, tokenize=True)   (templates that render incrementally)
  labels    genesis's trained tokens == the prefix-rendering rule computed here from
            transformers' renderings: a token trains when its first byte lies in an assistant
            turn's span, [len(render(conv[:i], gen=True)), len(render(conv[:i+1])))
Each family gets a byte-level tokenizer (ids 0..255 the bytes, as data/make_sft.py makes it)
plus its special tokens as added tokens, so that the ids test the rendering and the special
tokens' matching rather than a vocabulary that cannot be shipped here.

  python3 scripts/reference/check_chat_templates.py --genesis build/bin/genesis [--out DIR]
Prints a table; exits 1 on any difference.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "data"))
import make_sft  # noqa: E402  (the byte-level tokenizer)

SPECIAL = {
    "qwen2.5": ["<|im_start|>", "<|im_end|>", "<|endoftext|>"],
    "smollm2": ["<|im_start|>", "<|im_end|>", "<|endoftext|>"],
    "llama3.1": ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
                 "<|python_tag|>"],
    "mistral": ["<s>", "</s>", "[INST]", "[/INST]"],
    "gemma": ["<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"],
    "phi3": ["<s>", "<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"],
}

SYSTEM = {"role": "system", "content": "You are a terse assistant. Answer in one line."}
CONVERSATIONS = [
    [SYSTEM, {"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"},
     {"role": "user", "content": "And 3+3? "}, {"role": "assistant", "content": "6, as 3 + 3 = 6."}],
    [SYSTEM, {"role": "user", "content": "Name a colour.\nJust one."}, {"role": "assistant", "content": "Blue."}],
    [{"role": "user", "content": "Héllo — café ☕"}, {"role": "assistant", "content": " Bonjour! "},
     {"role": "user", "content": "Again"}, {"role": "assistant", "content": "Bonjour encore."}],
]


def model_dir(family, out):
    """The family's tokenizer_config.json beside a byte-level tokenizer.json with its specials."""
    d = os.path.join(out, family)
    make_sft.write_tokenizer(d)  # tokenizer.json (bytes + ChatML specials) and a config we replace
    with open(os.path.join(d, "tokenizer.json")) as f:
        tokenizer = json.load(f)
    config = json.load(open(os.path.join(ROOT, "tests/fixtures/chat_templates", family, "tokenizer_config.json")))
    tokenizer["added_tokens"] = [
        {"id": 256 + i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
         "special": True} for i, t in enumerate(SPECIAL[family])]
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, ensure_ascii=False)
    return d, config


def genesis_examples(genesis, family, d, out):
    """ids and labels of every conversation, as `genesis data preview --json` prepares them."""
    jsonl = os.path.join(out, family + ".jsonl")
    with open(jsonl, "w") as f:
        for conv in CONVERSATIONS:
            f.write(json.dumps({"messages": conv}, ensure_ascii=False) + "\n")
    recipe = os.path.join(out, family + ".toml")
    with open(recipe, "w") as f:
        f.write(f"""[run]
name = "templates"
device = "cpu"
[model]
name = "llama"
vocab_size = 512
hidden_size = 16
intermediate_size = 32
num_hidden_layers = 1
num_attention_heads = 2
[data]
name = "sft"
path = "{jsonl}"
tokenizer = "{d}"
chat_template = "{d}/tokenizer_config.json"
cache_dir = "{out}/cache"
seq_len = 1024
val_fraction = 0
[optimizer]
name = "adamw"
lr = 0.001
[training]
steps = 1
batch_size = 1
[eval]
split = "test"
""")
    run = subprocess.run([genesis, "data", "preview", recipe, "--json", "-n", "100", "-q"], capture_output=True,
                         text=True)
    if run.returncode != 0:
        raise RuntimeError(f"genesis data preview ({family}): {run.stderr.strip()}")
    return [json.loads(line) for line in run.stdout.splitlines()]


def ids_of(result):
    """apply_chat_template(tokenize=True) gives a list, or a BatchEncoding in newer versions."""
    if isinstance(result, dict) or hasattr(result, "keys"):
        result = result["input_ids"]
    return list(result)


def expected_labels(tok, conv, ids, token_bytes):
    """The prefix-rendering rule on transformers' renderings."""
    full = tok.apply_chat_template(conv, tokenize=False).encode()
    spans = []
    for i, m in enumerate(conv):
        if m["role"] != "assistant":
            continue
        prompt = tok.apply_chat_template(conv[:i], tokenize=False, add_generation_prompt=True).encode()
        through = tok.apply_chat_template(conv[:i + 1], tokenize=False).encode()
        eos = (tok.eos_token or "").encode()
        if not full.startswith(through) and eos and through.endswith(eos):
            through = through[:-len(eos)]
        if not full.startswith(prompt) or not full.startswith(through):
            return None  # not incremental: genesis marks the content instead (not this rule)
        spans.append((len(prompt), len(through)))
    labels, at = [], 0
    for t in ids:
        labels.append(t if any(b <= at < e for b, e in spans) else -100)
        at += len(token_bytes(t))
    return labels


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--genesis", default=os.path.join(ROOT, "build/bin/genesis"))
    p.add_argument("--out", default=None)
    a = p.parse_args()
    import transformers
    from transformers import AutoTokenizer

    out = a.out or tempfile.mkdtemp(prefix="chat_templates_")
    print(f"transformers {transformers.__version__}")
    print(f"{'family':10s} {'conv':>4s} {'ids':>5s} {'prompt':>7s} {'labels':>7s}  tokens trained")
    failures = 0
    for family in SPECIAL:
        d, config = model_dir(family, out)
        tok = AutoTokenizer.from_pretrained(d)
        alphabet = {v: k for k, v in make_sft.bytes_to_unicode().items()}

        def token_bytes(t):
            piece = tok.convert_ids_to_tokens(t)
            return piece.encode() if t >= 256 else bytes([alphabet[c] for c in piece])

        ours = genesis_examples(a.genesis, family, d, out)
        for n, conv in enumerate(CONVERSATIONS):
            mine = ours[n]
            theirs = ids_of(tok.apply_chat_template(conv, tokenize=True))
            same_ids = mine["ids"] == theirs
            trained = [i for i, l in enumerate(mine["labels"]) if l != -100]
            prompt_ok = "-"
            if trained:
                start = trained[-1]
                while start > 0 and mine["labels"][start - 1] != -100:
                    start -= 1
                rule = expected_labels(tok, conv, theirs, token_bytes)
                if rule is not None:
                    prompt = ids_of(tok.apply_chat_template(conv[:-1], tokenize=True, add_generation_prompt=True))
                    prompt_ok = "ok" if mine["ids"][:start] == prompt else "DIFF"
            rule = expected_labels(tok, conv, theirs, token_bytes)
            labels_ok = "marked" if rule is None else ("ok" if rule == mine["labels"] else "DIFF")
            row_failed = not same_ids or prompt_ok == "DIFF" or labels_ok == "DIFF"
            failures += row_failed
            print(f"{family:10s} {n:4d} {'ok' if same_ids else 'DIFF':>5s} {prompt_ok:>7s} {labels_ok:>7s}  "
                  f"{len(mine['ids']):6d} {len(trained):7d}")
            if not same_ids:
                print("  genesis:      ", mine["ids"][:80])
                print("  transformers: ", theirs[:80])
    shutil.rmtree(os.path.join(out, "cache"), ignore_errors=True)
    print("all equal" if failures == 0 else f"{failures} conversation(s) differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
