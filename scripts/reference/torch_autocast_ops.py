#!/usr/bin/env python3
"""PyTorch's CUDA autocast results for genesis's op-level parity test (tests/test_cuda_autocast_torch.cpp).

For each case: seeded f32 inputs (and integer targets), then under torch.autocast("cuda", DT) for
DT in bf16 and fp16 the op's output, and the f32 gradients of its floating inputs for the loss
sum(out.float() * weight) with a seeded weight. Everything goes to one safetensors file:
  <case>.in<i>            the inputs (f32, or i64 indices)
  <case>.weight           the weight of the gradient's loss (f32, shaped like the output)
  <case>.<dt>.out         the output in the dtype autocast gave it
  <case>.<dt>.grad<i>     the gradient of floating input i (f32)
The case names and their ops must match the genesis test's table.

  python3 scripts/reference/torch_autocast_ops.py OUT.safetensors
"""
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import save_file


def randn(*shape):
    return torch.randn(*shape, generator=GEN, device="cuda")


def ids(high, *shape):
    return torch.randint(0, high, shape, generator=GEN, device="cuda")


GEN = torch.Generator(device="cuda").manual_seed(0)

# name: (inputs, op); the ops follow genesis's arguments (weights [out, in], q/k/v [B, H, T, D]).
CASES = {
    "matmul": (lambda: [randn(64, 96), randn(96, 80)], lambda x: x[0] @ x[1]),
    "bmm": (lambda: [randn(3, 40, 64), randn(3, 64, 24)], lambda x: torch.bmm(x[0], x[1])),
    "linear": (lambda: [randn(4, 33, 96), randn(80, 96), randn(80)], lambda x: F.linear(x[0], x[1], x[2])),
    "conv2d": (lambda: [randn(2, 3, 17, 17), randn(8, 3, 3, 3), randn(8)],
               lambda x: F.conv2d(x[0], x[1], x[2], padding=1)),
    "attention": (lambda: [randn(2, 4, 130, 64), randn(2, 4, 130, 64), randn(2, 4, 130, 64)],
                  lambda x: F.scaled_dot_product_attention(x[0], x[1], x[2], is_causal=True)),
    "attention_gqa_d128": (lambda: [randn(1, 8, 77, 128), randn(1, 2, 77, 128), randn(1, 2, 77, 128)],
                           lambda x: F.scaled_dot_product_attention(x[0], x[1], x[2], is_causal=True,
                                                                    enable_gqa=True)),
    "layer_norm": (lambda: [randn(8, 96), randn(96), randn(96)],
                   lambda x: F.layer_norm(x[0], (96,), x[1], x[2], 1e-5)),
    "rms_norm": (lambda: [randn(8, 96), randn(96)], lambda x: F.rms_norm(x[0], (96,), x[1], 1e-6)),
    "softmax": (lambda: [randn(8, 100)], lambda x: torch.softmax(x[0], -1)),
    "log_softmax": (lambda: [randn(8, 100)], lambda x: torch.log_softmax(x[0], -1)),
    "cross_entropy": (lambda: [randn(16, 100), ids(100, 16)], lambda x: F.cross_entropy(x[0], x[1])),
    # genesis's fused head; PyTorch's autocast runs the linear in the low dtype and the loss in f32.
    "linear_cross_entropy": (lambda: [randn(16, 64), randn(1001, 64), ids(1001, 16)],
                             lambda x: F.cross_entropy(F.linear(x[0], x[1]), x[2])),
    "add_f32_low": (lambda: [randn(8, 96), randn(8, 96)], lambda x: x[0] + F.linear(x[1], torch.eye(96, device="cuda"))),
    "gelu_tanh": (lambda: [randn(8, 96)], lambda x: F.gelu(x[0], approximate="tanh")),
    "silu": (lambda: [randn(8, 96)], lambda x: F.silu(x[0])),
    "exp": (lambda: [randn(8, 96)], lambda x: torch.exp(x[0])),
    "sum": (lambda: [randn(8, 96)], lambda x: x[0].sum(-1)),
    "embedding": (lambda: [randn(50, 32), ids(50, 4, 7)], lambda x: F.embedding(x[1], x[0])),
}


def main():
    out_path = sys.argv[1]
    tensors = {}
    for name, (make_inputs, op) in CASES.items():
        inputs = make_inputs()
        for i, t in enumerate(inputs):
            tensors[f"{name}.in{i}"] = t.detach().cpu().contiguous()
        weight = None
        for label, dtype in (("bf16", torch.bfloat16), ("f16", torch.float16)):
            leaves = [t.detach().clone().requires_grad_(t.is_floating_point()) for t in inputs]
            with torch.autocast("cuda", dtype=dtype):
                out = op(leaves)
            if weight is None:
                weight = torch.rand(out.shape, generator=GEN, device="cuda") + 0.5
                tensors[f"{name}.weight"] = weight.cpu().contiguous()
            (out.float() * weight).sum().backward()
            tensors[f"{name}.{label}.out"] = out.detach().cpu().contiguous()
            for i, leaf in enumerate(leaves):
                if leaf.grad is not None:
                    tensors[f"{name}.{label}.grad{i}"] = leaf.grad.detach().float().cpu().contiguous()
    save_file(tensors, out_path, metadata={"torch": torch.__version__, "gpu": torch.cuda.get_device_name()})
    print(f"{len(CASES)} cases, {len(tensors)} tensors -> {out_path}")


if __name__ == "__main__":
    main()
