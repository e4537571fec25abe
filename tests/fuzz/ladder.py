#!/usr/bin/env python3
"""Size ladders for the readers whose cost could grow faster than their input: a valid input
of N units for a harness, written to a file that the harness binary runs once.

    python3 tests/fuzz/ladder.py HARNESS N OUT

safetensors: a header of N one-element F32 tensors.
tokenizer:   a tokenizer.json (selector byte 0) with N merges over a 64-character alphabet.
trainer_json: a trainer.json padded with N extra fields (genesis ignores unknown fields).
csv:         a table of N columns (the label first, the second categorical) and 4 rows.
"""
import json
import struct
import sys

ALPHABET = [chr(c) for c in range(ord("0"), ord("0") + 64)]  # '0'..'o': printable, one byte each


def safetensors(n):
    header = {f"layers.{i}.w": {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i in range(n)}
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + bytes(4 * n)


def tokenizer(n):
    # GPT-2's byte alphabet maps printable ASCII to itself, so the base vocabulary is the 256
    # byte symbols and every merge joins two existing tokens into a new one.
    byte_symbols = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    extra = [b for b in range(256) if b not in byte_symbols]
    symbols = [chr(c) for c in byte_symbols] + [chr(256 + i) for i in range(len(extra))]
    vocab = {s: i for i, s in enumerate(symbols)}
    merges = []
    level = ALPHABET
    while len(merges) < n:
        grown = []
        for left in level:
            for right in ALPHABET:
                if len(merges) == n:
                    break
                merges.append(f"{left} {right}")
                vocab[left + right] = len(vocab)
                grown.append(left + right)
            if len(merges) == n:
                break
        level = grown
    return b"\x00" + json.dumps({
        "version": "1.0",
        "added_tokens": [],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "vocab": vocab, "merges": merges},
    }).encode()


def csv(n):
    header = ",".join(f"c{i}" for i in range(n))
    rows = [",".join(["a" if r % 2 else "b", "x"] + [str(r + i) for i in range(n - 2)]) for r in range(4)]
    return b"\x04" + "\r\n".join([header] + rows).encode()


def trainer_json(n):
    state = {"step": 1, "epoch": 0, "batch_in_epoch": 1, "rng": {"seed": 0, "offset": 0}, "optimizer_steps": 1,
             "optimizer": "adamw", "scheduler": "cosine", "world_size": 1, "format_version": 1}
    state.update({f"note_{i}": i for i in range(n)})
    return json.dumps(state).encode()


if __name__ == "__main__":
    harness, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    with open(out, "wb") as f:
        f.write({"safetensors": safetensors, "tokenizer": tokenizer, "trainer_json": trainer_json, "csv": csv}[harness](n))
