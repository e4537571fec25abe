"""The host side of optimizer offload, measured with PyTorch on this machine's CPU threads: the
memory bandwidth of a plain copy (bytes read + written per second) and PyTorch's fused CPU AdamW
over --params f32 parameters (ns per parameter). genesis's offloaded step reads and writes 28
bytes per parameter (parameter, gradient, two moments read; parameter and moments written), so
its optimizer phase (`genesis bench train ... --set dist.offload_optimizer=true`) divided by the
parameter count compares with both figures.

  python3 scripts/bench/torch_host_adamw.py [--params 1e9] [--steps 5] [--json FILE]
"""
import argparse
import json
import os
import statistics
import time

import torch


def median_s(fn, steps):
    fn()  # warm-up: first touch of the pages
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--params", type=float, default=1e9, help="f32 parameters updated per step")
    p.add_argument("--tensor", type=float, default=64e6, help="elements per parameter tensor")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--json", help="write the figures as JSON")
    a = p.parse_args()
    torch.set_num_threads(os.cpu_count())
    n, per = int(a.params), int(a.tensor)

    src = torch.rand(n)
    dst = torch.empty(n)
    copy_s = median_s(lambda: dst.copy_(src), a.steps)
    del src, dst

    sizes = [per] * (n // per) + ([n % per] if n % per else [])
    params = [torch.nn.Parameter(torch.rand(s)) for s in sizes]
    for q in params:
        q.grad = torch.rand_like(q)
    try:
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, fused=True)
        kind = "fused"
    except (RuntimeError, ValueError):
        opt = torch.optim.AdamW(params, lr=1e-4, weight_decay=0.1, foreach=True)
        kind = "foreach"
    adam_s = median_s(opt.step, a.steps)

    out = {"torch": torch.__version__, "threads": torch.get_num_threads(), "params": n,
           "copy_gb_per_s": 8 * n / copy_s / 1e9, "adamw": kind, "adamw_ms": adam_s * 1e3,
           "adamw_ns_per_param": adam_s / n * 1e9, "adamw_gb_per_s_at_28_bytes": 28 * n / adam_s / 1e9}
    print(f"torch {out['torch']}, {out['threads']} threads: copy {out['copy_gb_per_s']:.1f} GB/s (read + write); "
          f"AdamW ({kind}) over {n / 1e9:.2f}B f32 parameters {out['adamw_ms']:.0f} ms, "
          f"{out['adamw_ns_per_param']:.3f} ns/parameter, {out['adamw_gb_per_s_at_28_bytes']:.1f} GB/s at 28 B/parameter")
    if a.json:
        json.dump(out, open(a.json, "w"), indent=2)


if __name__ == "__main__":
    main()
