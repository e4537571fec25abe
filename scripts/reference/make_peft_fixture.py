#!/usr/bin/env python3
"""PEFT LoRA fixtures: tiny models with a LoRA adapter made by `peft`, and their logits.

For each model type (llama, qwen2, gpt2): a random model built from a config (hidden 64, 2 layers,
4 heads, 2 kv heads for llama and qwen2, intermediate 128, vocab 320, 128 positions; llama's head
untied, qwen2's and gpt2's tied to the embedding), wrapped by peft's LoraConfig(r=4, lora_alpha=8,
lora_dropout=0) on every linear layer of the family (q/k/v/o/gate/up/down_proj; GPT-2's Conv1D
c_attn, c_proj, c_fc with fan_in_fan_out), with every lora_A and lora_B set to seeded random values
(PEFT starts lora_B at zero, which would leave the output unchanged). Writes

  OUT/<type>/base/            the base model's save_pretrained: config.json, model.safetensors, ...
  OUT/<type>/adapter/         the adapter's save_pretrained: adapter_config.json, adapter_model.safetensors
                              (README.md, PEFT's model card, is removed: it names the peft version;
                              target_modules is sorted: PEFT writes it in a different order each run)
  OUT/<type>/reference.json   input_ids [2, 17] (int), adapted_logits and base_logits [2, 17, 320]:
                              the float32 logits of the adapted model and of the base model alone,
                              each number the shortest decimal text that reads back as that float32

The base weights are drawn in float32, rounded to bfloat16 values and saved as bfloat16, which halves
the fixture; read back in float32 they are exactly the weights the references were computed with
(everything computed in float32, on the CPU, one thread, "eager" attention). Before writing the
references the script reloads both directories (from_pretrained + PeftModel.from_pretrained) and
checks that they reproduce the logits, that PEFT saved only lora_A/lora_B weights under
"base_model.model.", and that the adapter changes the logits. The output depends only on the seeds
and the torch / transformers / peft versions (recorded in reference.json). Usage, where torch,
transformers and peft are installed:

    python3 scripts/reference/make_peft_fixture.py [--out tests/fixtures/peft] [--vocab 320]

Sizes (torch 2.11, transformers 5.17, peft 0.21): at vocab 320 a type takes 456-505 KB (base weights
192-232 KB, reference.json 234 KB); --vocab 96 brings each to 265-284 KB.
"""
import argparse
import copy
import inspect
import json
import pathlib
import re
import shutil
import struct
import sys

import peft
import torch
import transformers
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from make_fixtures import SPECIAL, build, with_rope_theta

HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 128
POSITIONS = 128
BATCH, SEQ = 2, 17
RANK, ALPHA = 4, 8
SIZE_BUDGET = 300_000  # bytes per model type


def decoder_config(config_class, rope_theta, **settings):
    """A llama-family config of the fixture's sizes; `settings` holds what differs between families."""
    sizes = dict(hidden_size=HIDDEN, intermediate_size=INTERMEDIATE, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                 num_key_value_heads=KV_HEADS, max_position_embeddings=POSITIONS)
    kwargs = dict(rms_norm_eps=1e-6, hidden_act="silu", **sizes, **settings, **SPECIAL)
    return config_class(**with_rope_theta(config_class, kwargs, rope_theta))


def llama_config(vocab):
    return decoder_config(transformers.LlamaConfig, 10000.0, vocab_size=vocab, tie_word_embeddings=False,
                          attention_bias=False)


def qwen2_config(vocab):
    return decoder_config(transformers.Qwen2Config, 1000000.0, vocab_size=vocab, tie_word_embeddings=True,
                          use_sliding_window=False)


def gpt2_config(vocab):
    return transformers.GPT2Config(vocab_size=vocab, n_positions=POSITIONS, n_embd=HIDDEN, n_layer=LAYERS,
                                   n_head=HEADS, n_inner=INTERMEDIATE, activation_function="gelu_new",
                                   resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, layer_norm_epsilon=1e-5,
                                   tie_word_embeddings=True, **SPECIAL)


DECODER_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
# type: (config, seed, LoRA target modules, fan_in_fan_out)
MODELS = {
    "llama": (llama_config, 11, DECODER_TARGETS, False),
    "qwen2": (qwen2_config, 12, DECODER_TARGETS, False),
    "gpt2": (gpt2_config, 13, ["c_attn", "c_proj", "c_fc"], True),
}


def build_base(config, seed):
    """make_fixtures' random model (weights spread wider than transformers' default), rounded to bfloat16 values."""
    model = build(config, seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
    return model.eval()


def load_base(directory):
    """The saved base model in float32, "eager" attention as built."""
    version = tuple(int(part) for part in re.findall(r"\d+", transformers.__version__)[:2])
    dtype_key = "dtype" if version >= (4, 56) else "torch_dtype"  # renamed in transformers 4.56
    return AutoModelForCausalLM.from_pretrained(str(directory), attn_implementation="eager",
                                                **{dtype_key: torch.float32}).eval()


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.detach().to(torch.float32)


def save_options(method):
    return {"safe_serialization": True} if "safe_serialization" in inspect.signature(method).parameters else {}


def float32_text(x):
    """The shortest decimal text that reads back as the float32 x."""
    for digits in range(1, 10):
        text = f"{x:.{digits}g}"
        if struct.unpack("<f", struct.pack("<f", float(text)))[0] == x:
            return text
    raise AssertionError(f"no 9-digit text reads back as {x!r}")


def logits_json(logits):
    """[batch][seq][vocab] as JSON text, one line per token position."""
    rows = []
    for sequence in logits.tolist():
        positions = ["[" + ",".join(float32_text(v) for v in position) + "]" for position in sequence]
        rows.append("[\n    " + ",\n    ".join(positions) + "]")
    return "[\n   " + ",\n   ".join(rows) + "]"


def write_reference(path, fields, adapted, base):
    head = json.dumps(fields, indent=1, sort_keys=True)
    text = head[:-2] + ',\n "adapted_logits": ' + logits_json(adapted) + ',\n "base_logits": ' + logits_json(base)
    text += "\n}\n"
    json.loads(text)  # well-formed
    path.write_text(text)


def check_adapter_file(name, adapter_dir, targets):
    """PEFT saved exactly one lora_A/lora_B pair per adapted module, under base_model.model."""
    with safe_open(str(adapter_dir / "adapter_model.safetensors"), framework="pt") as f:
        names = sorted(f.keys())
    bad = [n for n in names if not n.startswith("base_model.model.")
           or not (n.endswith(".lora_A.weight") or n.endswith(".lora_B.weight"))]
    if bad:
        sys.exit(f"{name}: unexpected tensors in adapter_model.safetensors: {bad[:4]}")
    modules = {n.rsplit(".", 2)[0].split(".")[-1] for n in names}
    if modules != set(targets):
        sys.exit(f"{name}: adapted modules {sorted(modules)} are not the targets {sorted(targets)}")
    return names


def sort_target_modules(adapter_dir):
    """PEFT writes target_modules from a set, in an order that changes from run to run: sorted, the file is stable."""
    path = adapter_dir / "adapter_config.json"
    config = json.loads(path.read_text())
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
    path.write_text(json.dumps(config, indent=2, sort_keys=True))  # as PEFT writes it


def make_fixture(name, make_config, seed, targets, fan_in_fan_out, out_root, vocab):
    out = out_root / name
    if out.exists():
        shutil.rmtree(out)
    base_dir, adapter_dir = out / "base", out / "adapter"

    model = build_base(make_config(vocab), seed)
    generator = torch.Generator().manual_seed(1000 + seed)
    ids = torch.randint(0, vocab, (BATCH, SEQ), generator=generator, dtype=torch.int64)
    base_logits = logits_of(model, ids)
    # A copy: casting the model itself would round its float32 buffers (rotary inv_freq) too.
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(base_dir, **save_options(model.save_pretrained))

    config = LoraConfig(r=RANK, lora_alpha=ALPHA, lora_dropout=0.0, target_modules=targets, bias="none",
                        task_type="CAUSAL_LM", fan_in_fan_out=fan_in_fan_out)
    adapted = get_peft_model(model, config)
    # Repository-relative, so that the fixture names no machine path.
    adapted.peft_config["default"].base_model_name_or_path = f"tests/fixtures/peft/{name}/base"
    with torch.no_grad():
        for pname, p in sorted(adapted.named_parameters()):
            if "lora_A" in pname:
                p.copy_(torch.randn(p.shape, generator=generator) / p.shape[1] ** 0.5)
            elif "lora_B" in pname:
                p.copy_(0.1 * torch.randn(p.shape, generator=generator))
    adapted.eval()
    adapted_logits = logits_of(adapted, ids)
    with adapted.disable_adapter():
        if not torch.equal(logits_of(adapted, ids), base_logits):
            sys.exit(f"{name}: the wrapped model with its adapter disabled differs from the base model")
    adapted.save_pretrained(adapter_dir, **save_options(adapted.save_pretrained))
    (adapter_dir / "README.md").unlink(missing_ok=True)
    sort_target_modules(adapter_dir)
    tensors = check_adapter_file(name, adapter_dir, targets)

    reloaded_base = load_base(base_dir)
    if not torch.equal(logits_of(reloaded_base, ids), base_logits):
        sys.exit(f"{name}: the saved base model does not reproduce the base logits")
    reloaded = PeftModel.from_pretrained(reloaded_base, str(adapter_dir)).eval()
    gap = float((logits_of(reloaded, ids) - adapted_logits).abs().max())
    if gap > 1e-6:
        sys.exit(f"{name}: the saved adapter reproduces the adapted logits only within {gap:.3e}")
    change = float((adapted_logits - base_logits).abs().max())
    if change < 1e-2:
        sys.exit(f"{name}: the adapter changes the logits by {change:.3e} only")

    fields = {
        "model_type": name,
        "input_ids": ids.tolist(),
        "shape": list(adapted_logits.shape),
        "lora": {"r": RANK, "lora_alpha": ALPHA, "lora_dropout": 0.0, "target_modules": targets,
                 "fan_in_fan_out": fan_in_fan_out},
        "computed": "float32, CPU, 1 thread, attn_implementation eager",
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "peft": peft.__version__},
    }
    write_reference(out / "reference.json", fields, adapted_logits, base_logits)
    size = sum(f.stat().st_size for f in out.rglob("*") if f.is_file())
    files = ", ".join(f"{f.relative_to(out)} {f.stat().st_size}" for f in sorted(out.rglob("*")) if f.is_file())
    print(f"{name}: {len(tensors)} adapter tensors, logits change by the adapter max {change:.4f}, "
          f"{size} bytes ({files})")
    if size > SIZE_BUDGET:
        print(f"warning: {name}: {size} bytes, over the {SIZE_BUDGET}-byte budget", file=sys.stderr)
    return size


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(pathlib.Path(__file__).resolve().parents[2] / "tests/fixtures/peft"))
    parser.add_argument("--vocab", type=int, default=320,
                        help="vocabulary size (96, the other fixtures' size, brings each type under 300 KB)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    torch.set_default_dtype(torch.float32)
    out_root = pathlib.Path(args.out)
    total = sum(make_fixture(name, *spec, out_root, args.vocab) for name, spec in MODELS.items())
    print(f"total {total} bytes in {out_root} (torch {torch.__version__}, transformers {transformers.__version__}, "
          f"peft {peft.__version__})")


if __name__ == "__main__":
    main()
