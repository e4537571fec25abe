#!/usr/bin/env python3
"""Makes the data of the SFT example recipes: a chat task a model cannot do before it is
fine-tuned, and the byte-level tokenizer it is tokenized with. Deterministic (seeded) and
offline: nothing is downloaded.

  data/make_sft.py [--out DATA_ROOT] [--train 20000] [--val 400] [--seed 1]
  (DATA_ROOT: the data root of data/genesis_paths.py)

Produces
  OUT/sft_reverse/train.jsonl, val.jsonl   {"messages": [system, user, assistant]}: reverse the
                                           order of 3 to 6 words ("Reverse: red fox ran" ->
                                           "ran fox red"); the validation word lists never
                                           occur in training
  OUT/sft_repeat/train.jsonl, val.jsonl    the same words repeated in their order ("Repeat: red
                                           fox ran" -> "red fox ran"): the task of the base
                                           model that recipes/lora_reverse_cpu.toml adapts; it
                                           never holds sft_reverse's validation word lists
  OUT/bytes/tokenizer.json                 a byte-level BPE without merges (ids 0..255 are the
                                           bytes) plus ChatML's <|im_start|>, <|im_end|> and
                                           <|endoftext|> (256, 257, 258)
  OUT/bytes/tokenizer_config.json          ChatML's chat template, eos_token <|im_end|>
"""
import argparse
import json
import os
import random

from genesis_paths import data_root  # noqa: E402  beside this script

WORDS = """red blue green gold gray pink black white fox cat dog owl bee ant elk yak cow pig hen
ram sun moon star rain snow wind fire ice sea lake hill road tree leaf rose oak fig plum pear
lime corn rice bread milk salt tea jam pie cake soup""".split()

# task: (directory, system prompt, user prefix, answer of a word list)
TASKS = {
    "reverse": ("sft_reverse", "You reverse the order of words.", "Reverse: ", lambda words: reversed(words)),
    "repeat": ("sft_repeat", "You repeat the words.", "Repeat: ", lambda words: words),
}

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def bytes_to_unicode():
    """GPT-2's reversible map from bytes to printable characters (the ByteLevel alphabet)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    codes = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            codes.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, codes)}


def write_tokenizer(out):
    os.makedirs(out, exist_ok=True)
    alphabet = bytes_to_unicode()
    tokenizer = {
        "version": "1.0",
        "added_tokens": [
            {"id": 256 + i, "content": name, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": True}
            for i, name in enumerate(["<|im_start|>", "<|im_end|>", "<|endoftext|>"])
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
                  "vocab": {alphabet[b]: b for b in range(256)}, "merges": []},
    }
    config = {"chat_template": CHATML, "eos_token": "<|im_end|>", "bos_token": None, "pad_token": "<|endoftext|>",
              "model_max_length": 256, "tokenizer_class": "PreTrainedTokenizerFast"}
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False)
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=2)


def conversation(task, words):
    _, system, prefix, answer = TASKS[task]
    return {"messages": [
        {"role": "system", "content": system},
        {"role": "user", "content": prefix + " ".join(words)},
        {"role": "assistant", "content": " ".join(answer(words))},
    ]}


def write_task(out, task, train, val, seed, seen):
    """Writes the task's train and val files from word lists not in `seen` (which gains them)."""
    out = os.path.join(out, TASKS[task][0])
    os.makedirs(out, exist_ok=True)
    rng = random.Random(seed)

    def fresh():
        while True:
            words = tuple(rng.choice(WORDS) for _ in range(rng.randint(3, 6)))
            if words not in seen:
                seen.add(words)
                return list(words)

    val_rows = [fresh() for _ in range(val)]  # drawn first: training never holds them
    train_rows = [fresh() for _ in range(train)]
    for name, rows in (("train.jsonl", train_rows), ("val.jsonl", val_rows)):
        tmp = os.path.join(out, name + ".tmp")
        with open(tmp, "w") as f:
            for words in rows:
                f.write(json.dumps(conversation(task, words)) + "\n")
        os.replace(tmp, os.path.join(out, name))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=data_root())
    p.add_argument("--train", type=int, default=20000)
    p.add_argument("--val", type=int, default=400)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    write_tokenizer(os.path.join(a.out, "bytes"))
    seen = set()
    write_task(a.out, "reverse", a.train, a.val, a.seed, seen)
    # The repeat task draws after reverse from its own generator, so sft_reverse stays as it was
    # and the base trained on sft_repeat never sees a word list of sft_reverse (val or train).
    write_task(a.out, "repeat", a.train, a.val, a.seed + 1, seen)
    print(f"make_sft: {a.out}/sft_reverse and {a.out}/sft_repeat (train {a.train}, val {a.val} each) "
          f"and {a.out}/bytes")


if __name__ == "__main__":
    main()
