#!/usr/bin/env python3
"""Proof that a model trained by genesis means the same thing in transformers (docs/convert.md).

Given a genesis language-model run directory, this script:
  1. exports it with `genesis convert RUN DIR --to hf`, in f32 and in bf16;
  2. loads each export with transformers' AutoModelForCausalLM, failing on any missing,
     unexpected or mismatched weight;
  3. compares greedy generations from fixed prompts: genesis's own (`genesis generate
     --checkpoint RUN --ids`, from the checkpoint) and transformers' on the f32 export must be
     the same ids, token for token;
  4. checks that hf -> genesis -> hf gives back every tensor bit for bit, and reports the bf16
     export's logits error relative to the f32 export's largest logit (at most 3e-2);
  5. loads the exported tokenizer files with AutoTokenizer and checks that it encodes a text
     as `genesis data encode` does with the checkpoint's tokenizer.
Prints one verdict line and exits 1 on any failure.

    python3 scripts/reference/check_trained_export.py --genesis build/bin/genesis RUN_DIR
"""
import argparse
import logging
import pathlib
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

PROMPTS = [[464, 3290, 318], [40, 1101, 257, 1263, 11, 290], [1870]]
TEXT = "Call me Ishmael. Some years ago\u2014never mind how long precisely\u2014having little money, 1851.\n"

NEW_TOKENS = 32


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAIL: {' '.join(map(str, cmd))}: {result.stderr.strip()}")
    return result.stdout


def load(directory, dtype):
    logging.getLogger("transformers").setLevel(logging.ERROR)
    model, info = AutoModelForCausalLM.from_pretrained(directory, torch_dtype=dtype, output_loading_info=True)
    problems = {k: v for k, v in info.items() if v and k != "error_msgs"} | (
        {"error_msgs": info["error_msgs"]} if info.get("error_msgs") else {})
    if problems:
        sys.exit(f"FAIL: {directory}: {problems}")
    return model.eval()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--genesis", required=True)
    parser.add_argument("run", type=pathlib.Path)
    args = parser.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        run([args.genesis, "convert", args.run, tmp / "f32", "--to", "hf"])
        run([args.genesis, "convert", args.run, tmp / "bf16", "--to", "hf", "--dtype", "bf16"])
        run([args.genesis, "convert", tmp / "f32", tmp / "genesis", "--to", "genesis"])
        run([args.genesis, "convert", tmp / "genesis", tmp / "again", "--to", "hf"])
        first, again = load_file(tmp / "f32" / "model.safetensors"), load_file(tmp / "again" / "model.safetensors")
        if first.keys() != again.keys() or any(not torch.equal(first[k], again[k]) for k in first):
            failures.append("genesis -> hf -> genesis -> hf changed a tensor")
        f32, bf16 = load(tmp / "f32", torch.float32), load(tmp / "bf16", torch.bfloat16)
        worst_bf16 = 0.0
        for prompt in PROMPTS:
            ids = torch.tensor([prompt])
            ours = run([args.genesis, "generate", "--checkpoint", args.run, "--prompt-ids",
                        " ".join(map(str, prompt)), "--max-new-tokens", str(NEW_TOKENS), "--temperature", "0",
                        "--ids"]).split()
            with torch.no_grad():
                theirs = f32.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=NEW_TOKENS,
                                      min_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)[0, len(prompt):]
                logits = f32(ids).logits
                half = bf16(ids).logits.float()
            worst_bf16 = max(worst_bf16, float((half - logits).abs().max() / logits.abs().max()))
            if [int(t) for t in ours] != theirs.tolist()[:len(ours)] or len(ours) == 0:
                failures.append(f"greedy ids differ from prompt {prompt}: genesis {ours[:8]}... "
                                f"transformers {theirs.tolist()[:8]}...")
        text_file = tmp / "text.txt"
        text_file.write_text(TEXT, encoding="utf-8")
        ours = [int(t) for t in run([args.genesis, "data", "encode", "--tokenizer",
                                     args.run / "checkpoints" / "latest", "--input", text_file]).split()]
        theirs = AutoTokenizer.from_pretrained(tmp / "f32")(TEXT)["input_ids"]
        if ours != theirs:
            failures.append(f"AutoTokenizer of the export encodes differently: {theirs[:8]}... vs {ours[:8]}...")
        if worst_bf16 > 3e-2:
            failures.append(f"bf16 export's logits differ by {worst_bf16:.3g} of the largest logit")
    if failures:
        print("FAIL " + str(args.run) + ": " + "; ".join(failures))
        return 1
    print(f"PASS {args.run}: f32 export loads in transformers with every weight, greedy {NEW_TOKENS}-token "
          f"generations equal genesis's for {len(PROMPTS)} prompts, round trip bit-identical, bf16 export's "
          f"logits within {worst_bf16:.2g} of the largest logit, exported tokenizer encodes as genesis")
    return 0


if __name__ == "__main__":
    sys.exit(main())
