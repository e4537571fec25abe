#!/usr/bin/env python3
"""PyTorch side of `genesis bench`: the same suite, timing method and JSON schema.

    scripts/bench/torch_ops.py recipes/bench/ops.toml --device cuda --dtype bf16 --json torch_bf16.json
    scripts/bench/torch_ops.py --alloc --device cuda --json torch_alloc.json
    genesis bench compare genesis_bf16.json torch_bf16.json

Each case is checked against a float64 CPU reference first (a failing case is reported,
never timed), then timed with torch.cuda.Event after a warm-up, with a buffer twice the
size of the L2 cache written before every repetition and the inputs rotated among four
sets when one set is smaller than the cache. AdamW uses fused=True on CUDA (PyTorch's
fastest eager optimizer). The JSON schema is described in docs/benchmarks.md.
"""
import argparse
import json
import math
import os
import re
import sys
import time
import tomllib
import zlib

import torch
import torch.nn.functional as F

from torch_alloc import cpu_model_name, fmt, header, run_alloc, write_json

CASE_KEYS = {"name", "op", "shapes", "dtypes", "backward", "axes", "dim", "scalar", "variant", "check_rows", "tolerance"}
DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = {"f64": 1e-9, "f32": 1e-3, "f16": 1e-2, "bf16": 2e-2}
ROW_INPUTS = {"matmul": [0], "bmm": [0, 1], "linear": [0], "embedding": [1], "attention": [0, 1, 2], "conv2d": [0],
              "max_pool2d": [0]}


def fail(message):
    print(f"torch_ops.py: error: {message}", file=sys.stderr)
    sys.exit(2)


# --- the suite ------------------------------------------------------------------------

def load_suite(path):
    try:
        with open(path, "rb") as f:
            suite = tomllib.load(f)
    except OSError as e:
        fail(f"cannot read suite {path}: {e}")
    except tomllib.TOMLDecodeError as e:
        fail(f"bench suite {path}: {e}")
    cases, names = [], set()
    for c in suite.get("case", []):
        unknown = set(c) - CASE_KEYS
        if unknown or "name" not in c or "op" not in c or "shapes" not in c:
            fail(f"bench suite {path}: case {c.get('name', '?')!r} has unknown keys {sorted(unknown)} or lacks name/op/shapes")
        if c["op"] not in OPS and c["op"] != "adamw":
            fail(f"bench suite {path}: case {c['name']!r}: unknown op {c['op']!r}")
        if c["name"] in names:
            fail(f"bench suite {path}: duplicate case name {c['name']!r}")
        names.add(c["name"])
        c.setdefault("dtypes", ["f32", "bf16"])
        c.setdefault("backward", False)
        c.setdefault("axes", [])
        c.setdefault("dim", -1)
        c.setdefault("scalar", 2.0)
        c.setdefault("variant", "")
        c.setdefault("check_rows", 0)
        c.setdefault("tolerance", 0.0)
        cases.append(c)
    if not cases:
        fail(f"bench suite {path}: no [[case]] tables")
    return cases


def numel(shape):
    return math.prod(shape)


# --- ops: inputs (shape, index bound or 0, needs grad), forward, cost ----------------------

def data_inputs(c):
    return [(s, 0, c["backward"]) for s in c["shapes"]]


def norm_inputs(params):
    def inputs(c):
        n = c["shapes"][0][-1]
        return [(c["shapes"][0], 0, c["backward"])] + [([n], 0, c["backward"])] * params
    return inputs


def streaming(c, es):
    x = numel(c["shapes"][0]) * es
    return (5 * x if c["backward"] else 2 * x), 0.0


def reduction(c, es, axes):
    s = c["shapes"][0]
    reduced = numel(s) if not axes else math.prod(s[a] for a in axes)
    inp = numel(s) * es
    out = inp / reduced
    return (2 * (inp + out) if c["backward"] else inp + out), 0.0


def broadcast(a, b):
    n = max(len(a), len(b))
    a, b = [1] * (n - len(a)) + list(a), [1] * (n - len(b)) + list(b)
    return [max(x, y) for x, y in zip(a, b)]


def binary_cost(c, es):
    a, b = c["shapes"]
    fwd = (numel(a) + numel(b) + numel(broadcast(a, b))) * es
    return (2 * fwd if c["backward"] else fwd), 0.0


def matrix_product(c, es, a=None, b=None):
    a = a or c["shapes"][0]
    b = b or c["shapes"][1]
    m, k, cols = a[-2], a[-1], b[-1]
    batch = max(numel(a) / (m * k), numel(b) / (k * cols))
    flops, nbytes = 2 * batch * m * k * cols, (numel(a) + numel(b) + batch * m * cols) * es
    return (3 * nbytes, 3 * flops) if c["backward"] else (nbytes, flops)


def norm_cost(params):
    def cost(c, es):
        b, _ = streaming(c, es)
        return b + params * c["shapes"][0][-1] * es * (2 if c["backward"] else 1), 0.0
    return cost


def lse_axes(c):
    return c["axes"] or [c["dim"]]


OPS = {
    "add": (data_inputs, lambda c, x: x[0] + x[1], binary_cost),
    "mul": (data_inputs, lambda c, x: x[0] * x[1], binary_cost),
    "mul_scalar": (data_inputs, lambda c, x: x[0] * c["scalar"], streaming),
    "gelu": (data_inputs, lambda c, x: F.gelu(x[0], approximate="tanh" if c["variant"] == "tanh" else "none"), streaming),
    "silu": (data_inputs, lambda c, x: F.silu(x[0]), streaming),
    "exp": (data_inputs, lambda c, x: torch.exp(x[0]), streaming),
    "sum": (data_inputs, lambda c, x: x[0].sum(dim=c["axes"]) if c["axes"] else x[0].sum(),
            lambda c, es: reduction(c, es, c["axes"])),
    "mean": (data_inputs, lambda c, x: x[0].mean(dim=c["axes"]) if c["axes"] else x[0].mean(),
             lambda c, es: reduction(c, es, c["axes"])),
    "softmax": (data_inputs, lambda c, x: torch.softmax(x[0], c["dim"]), streaming),
    "log_softmax": (data_inputs, lambda c, x: torch.log_softmax(x[0], c["dim"]), streaming),
    "logsumexp": (data_inputs, lambda c, x: torch.logsumexp(x[0], dim=lse_axes(c)),
                  lambda c, es: reduction(c, es, lse_axes(c))),
    "cat": (data_inputs, lambda c, x: torch.cat(x, c["dim"]),
            lambda c, es: ((4 if c["backward"] else 2) * sum(numel(s) for s in c["shapes"]) * es, 0.0)),
    "cast": (data_inputs, lambda c, x: x[0].to(DTYPES[c["variant"]]), streaming),
    "transpose_copy": (data_inputs, lambda c, x: x[0].transpose(-2, -1).contiguous(), streaming),
    "layer_norm": (norm_inputs(2), lambda c, x: F.layer_norm(x[0], (c["shapes"][0][-1],), x[1], x[2], 1e-5), norm_cost(2)),
    "rms_norm": (norm_inputs(1), lambda c, x: F.rms_norm(x[0], (c["shapes"][0][-1],), x[1], 1e-6), norm_cost(1)),
    "cross_entropy": (lambda c: [(c["shapes"][0], 0, c["backward"]), ([c["shapes"][0][0]], c["shapes"][0][1], False)],
                      lambda c, x: F.cross_entropy(x[0], x[1]),
                      lambda c, es: (numel(c["shapes"][0]) * es * (2 if c["backward"] else 1) + 8 * c["shapes"][0][0], 0.0)),
    "embedding": (lambda c: [(c["shapes"][0], 0, c["backward"]), (c["shapes"][1], c["shapes"][0][0], False)],
                  lambda c, x: F.embedding(x[1], x[0]),
                  lambda c, es: embedding_cost(c, es)),
    "matmul": (data_inputs, lambda c, x: x[0] @ x[1], matrix_product),
    "bmm": (data_inputs, lambda c, x: torch.bmm(x[0], x[1]), matrix_product),
    "linear": (data_inputs, lambda c, x: F.linear(x[0], x[1], x[2] if len(x) > 2 else None),
               lambda c, es: matrix_product(c, es, [numel(c["shapes"][0]) // c["shapes"][0][-1], c["shapes"][0][-1]],
                                            [c["shapes"][1][1], c["shapes"][1][0]])),
    # q [B, Hq, T, D], k and v [B, Hkv, T, D] (grouped heads through enable_gqa); causal.
    "attention": (data_inputs,
                  lambda c, x: F.scaled_dot_product_attention(x[0], x[1], x[2], is_causal=True,
                                                              enable_gqa=x[0].size(1) != x[1].size(1)),
                  lambda c, es: attention_cost(c, es)),
    # x [N, C, H, W], weight [O, C, kH, kW], bias [O]: stride 1, "same" padding (k // 2).
    "conv2d": (data_inputs,
               lambda c, x: F.conv2d(x[0], x[1], x[2] if len(x) > 2 else None,
                                     padding=(c["shapes"][1][2] // 2, c["shapes"][1][3] // 2)),
               lambda c, es: conv2d_cost(c, es)),
    "max_pool2d": (data_inputs, lambda c, x: F.max_pool2d(x[0], 2),
                   lambda c, es: ((2.5 if c["backward"] else 1.25) * numel(c["shapes"][0]) * es, 0.0)),
    "relu": (data_inputs, lambda c, x: F.relu(x[0]), streaming),
    # The head and loss of a language model as PyTorch eager computes it: bf16 logits, f32 loss.
    "linear_cross_entropy": (lambda c: [(c["shapes"][0], 0, c["backward"]), (c["shapes"][1], 0, c["backward"]),
                                        ([c["shapes"][0][0]], c["shapes"][1][0], False)],
                             lambda c, x: F.cross_entropy(F.linear(x[0], x[1]).float(), x[2]),
                             lambda c, es: linear_cross_entropy_cost(c, es)),
}


def attention_cost(c, es):
    q = c["shapes"][0]
    flops = 2.0 * numel(q) * q[2]
    nbytes = (2 * numel(q) + numel(c["shapes"][1]) + numel(c["shapes"][2])) * es
    return (2.5 * nbytes, 3.5 * flops) if c["backward"] else (nbytes, flops)


def conv2d_cost(c, es):
    x, w = c["shapes"][0], c["shapes"][1]
    out = x[0] * w[0] * x[2] * x[3]
    flops = 2.0 * out * w[1] * w[2] * w[3]
    nbytes = (numel(x) + numel(w) + out) * es
    return (3 * nbytes, 3 * flops) if c["backward"] else (nbytes, flops)


def linear_cross_entropy_cost(c, es):
    flops = 2.0 * numel(c["shapes"][0]) * c["shapes"][1][0]
    nbytes = (numel(c["shapes"][0]) + numel(c["shapes"][1])) * es
    return (3 * nbytes, 3 * flops) if c["backward"] else (nbytes, flops)


def embedding_cost(c, es):
    rows = numel(c["shapes"][1]) * c["shapes"][0][1] * es
    fwd = 8 * numel(c["shapes"][1]) + 2 * rows
    return (fwd + rows + numel(c["shapes"][0]) * es if c["backward"] else fwd), 0.0


def case_cost(c, dtype):
    es = torch.empty((), dtype=DTYPES[dtype]).element_size()
    if c["op"] == "adamw":
        return 7 * sum(numel(s) for s in c["shapes"]) * es, 0.0
    return OPS[c["op"]][2](c, es)


# --- workloads --------------------------------------------------------------------------

def seed_of(name):
    return zlib.crc32(name.encode())


def draw(spec, dtype, device, gen):
    shape, bound, grad = spec
    if bound:
        return torch.randint(0, bound, shape, device=device, generator=gen)
    t = torch.randn(shape, device=device, generator=gen).to(dtype)
    return t.requires_grad_(grad)


def reference_copy(t, grad=False):
    c = t.detach().cpu()
    c = c.double() if c.is_floating_point() else c.clone()
    return c.requires_grad_(grad)


def relative_error(out, ref):
    out, ref = out.detach().double().cpu(), ref.detach().double().cpu()
    if out.shape != ref.shape:
        raise RuntimeError(f"the result has shape {list(out.shape)} but the reference has {list(ref.shape)}")
    diff, norm = torch.linalg.vector_norm(out - ref).item(), torch.linalg.vector_norm(ref).item()
    if math.isnan(diff) or math.isnan(norm):
        return math.nan
    return diff / norm if norm > 0 else diff


class OpWorkload:
    def __init__(self, c, dtype, device, cache_bytes):
        self.c, self.device, self.dtype = c, device, DTYPES[dtype]
        inputs, self.forward, _ = OPS[c["op"]]
        self.specs = inputs(c)
        self.gen = torch.Generator(device=device).manual_seed(seed_of(c["name"]))
        nbytes = sum(numel(s[0]) for s in self.specs) * torch.empty((), dtype=self.dtype).element_size()
        sets = 4 if nbytes * 4 < cache_bytes else 1
        self.sets = [[draw(s, self.dtype, device, self.gen) for s in self.specs] for _ in range(sets)]
        self.grad_out = None

    def outputs(self, x, grad_out):
        if not self.c["backward"]:
            with torch.no_grad():
                return [self.forward(self.c, x)]
        for t in x:
            t.grad = None
        out = self.forward(self.c, x)
        out.backward(grad_out)
        return [out.detach()] + [t.grad for t in x if t.requires_grad]

    def check(self):
        x = self.sets[0]
        if self.c["check_rows"] > 0:
            return self.check_rows()
        if self.c["backward"]:
            with torch.no_grad():
                probe = self.forward(self.c, x)
            if probe.dim() > 0:
                self.grad_out = torch.randn(probe.shape, device=self.device, generator=self.gen).to(self.dtype)
        got = self.outputs(x, self.grad_out)
        ref_in = [reference_copy(t, spec[2]) for t, spec in zip(x, self.specs)]
        ref = self.outputs(ref_in, None if self.grad_out is None else reference_copy(self.grad_out))
        return max(relative_error(a, b) for a, b in zip(got, ref))

    def check_rows(self):
        x = self.sets[0]
        with torch.no_grad():
            out = self.forward(self.c, x)
            rows, half = out.shape[0], max(1, self.c["check_rows"] // 2)
            blocks = [(0, min(rows, half))]
            if rows > 2 * half:
                blocks.append((rows - half, half))
            elif rows > half:
                blocks[0] = (0, rows)
            worst = 0.0
            for start, count in blocks:
                ref_in = [reference_copy(t.narrow(0, start, count) if i in ROW_INPUTS[self.c["op"]] else t)
                          for i, t in enumerate(x)]
                err = relative_error(out.narrow(0, start, count), self.forward(self.c, ref_in))
                if math.isnan(err):
                    return err
                worst = max(worst, err)
        return worst

    def run(self, rep):
        self.outputs(self.sets[rep % len(self.sets)], self.grad_out)


class AdamWWorkload:
    def __init__(self, c, dtype, device):
        gen = torch.Generator(device=device).manual_seed(seed_of(c["name"]))
        dt = DTYPES[dtype]
        self.params = []
        for s in c["shapes"]:
            p = (torch.randn(s, device=device, generator=gen) * 0.02).to(dt).requires_grad_(True)
            p.grad = torch.randn(s, device=device, generator=gen).to(dt)
            self.params.append(p)
        self.opt = make_adamw(self.params, device)

    def check(self):
        before = [reference_copy(p) for p in self.params]
        ref_params = []
        for b, p in zip(before, self.params):
            r = b.clone().requires_grad_(True)
            r.grad = reference_copy(p.grad)
            ref_params.append(r)
        make_adamw(ref_params, "cpu").step()
        self.opt.step()
        return max(relative_error(reference_copy(p) - b, r.detach() - b) for p, r, b in zip(self.params, ref_params, before))

    def run(self, rep):
        self.opt.step()


def make_adamw(params, device):
    fused = {"fused": True} if str(device).startswith("cuda") else {}
    return torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.1, **fused)


# --- timing -----------------------------------------------------------------------------

class Timer:
    def __init__(self, device, flush_mib, flush_mode="read"):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            props = torch.cuda.get_device_properties(self.device)
            self.name = props.name
            self.cache_bytes = getattr(props, "L2_cache_size", 50 << 20)
        else:
            self.name = cpu_model_name()
            self.cache_bytes = os.sysconf("SC_LEVEL3_CACHE_SIZE") if "SC_LEVEL3_CACHE_SIZE" in os.sysconf_names else 32 << 20
            self.cache_bytes = self.cache_bytes if self.cache_bytes > 0 else 32 << 20
        if flush_mib is not None and flush_mib >= 0:
            self.flush_bytes = flush_mib << 20
        else:
            self.flush_bytes = 2 * self.cache_bytes if self.cuda else min(2 * self.cache_bytes, 128 << 20)
        self.flush_mode = flush_mode
        self.flush_buffer = (torch.zeros(self.flush_bytes // 4, dtype=torch.float32, device=self.device)
                             if self.flush_bytes else None)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def flush(self, rep):
        # As genesis bench: reading leaves the cache clean; writing leaves it dirty, and the
        # timed op then pays for writing the flush's data back.
        if self.flush_buffer is None:
            return
        if self.flush_mode == "read":
            self.flush_buffer.sum()
        else:
            self.flush_buffer.fill_(rep & 0x7F)

    def time(self, fn, reps):
        if self.cuda:
            events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
            for i, (start, end) in enumerate(events):
                self.flush(i)
                start.record()
                fn(i)
                end.record()
            self.sync()
            return [start.elapsed_time(end) for start, end in events]
        ms = []
        for i in range(reps):
            self.flush(i)
            t0 = time.perf_counter()
            fn(i)
            ms.append(1e3 * (time.perf_counter() - t0))
        return ms

    def warm_up(self, fn, max_reps, budget_ms):
        fn(0)
        self.sync()
        per_call = max(median(self.time(fn, 3)), 1e-3)
        return max(min(5, max_reps), min(max_reps, int(budget_ms / per_call)))

    def host_overhead_us(self, fn, n):
        self.sync()
        t0 = time.perf_counter()
        for i in range(n):
            fn(i)
        issued = time.perf_counter()
        self.sync()
        done = time.perf_counter()
        return 1e6 * (issued - t0) / n, 1e6 * (done - t0) / n


def percentile(values, q):
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (pos - lo) * (s[hi] - s[lo])


def median(values):
    return percentile(values, 0.5)


def measure_ceilings(timer):
    dev = timer.device
    nbytes = (1 << 30) if timer.cuda else (64 << 20)
    src = torch.ones(nbytes // 4, device=dev)
    dst = torch.empty_like(src)

    def med(fn, max_reps=30):
        return median(timer.time(fn, timer.warm_up(fn, max_reps, 1000.0)))

    copy = 2 * nbytes / (med(lambda i: dst.copy_(src)) * 1e6)
    n = 8192 if timer.cuda else 512
    torch.backends.cuda.matmul.allow_tf32 = False
    rates = {}
    for name, dt in (("f32", torch.float32), ("bf16", torch.bfloat16)):
        a, b = torch.randn(n, n, device=dev).to(dt), torch.randn(n, n, device=dev).to(dt)
        rates[name] = 2 * n ** 3 / (med(lambda i: a @ b) * 1e9)
    return {"copy_gbps": copy, "copy_kernel_gbps": copy, "gemm_size": n, "gemm_tflops": rates}


def run_case(c, dtype, timer, ceilings, args):
    nbytes, flops = case_cost(c, dtype)
    tol = c["tolerance"] or TOLERANCE[dtype]
    row = {"name": c["name"], "op": c["op"], "shapes": c["shapes"], "dtype": dtype, "backward": c["backward"],
           "where": args.suite, "bytes": nbytes, "flops": flops, "tolerance": tol, "status": "ok", "message": None,
           "check_rel_err": None, "median_ms": None, "p10_ms": None, "p90_ms": None, "reps": None, "gbps": None,
           "tflops": None, "pct_of_ceiling": None, "host_us": None, "back_to_back_us": None}
    try:
        if c["op"] == "adamw":
            work = AdamWWorkload(c, dtype, timer.device)
        else:
            work = OpWorkload(c, dtype, timer.device, timer.cache_bytes)
        err = work.check()
        row["check_rel_err"] = "nan" if math.isnan(err) else err
        if not err <= tol:
            row["status"] = "FAIL"
            row["message"] = f"relative error {err} against the CPU float64 reference exceeds {tol}"
            return row
        reps = timer.warm_up(work.run, args.reps, args.budget_ms)
        ms = timer.time(work.run, reps)
        row.update(median_ms=median(ms), p10_ms=percentile(ms, 0.1), p90_ms=percentile(ms, 0.9), reps=reps)
        arithmetic = flops > 0
        rate = flops / (row["median_ms"] * 1e9) if arithmetic else nbytes / (row["median_ms"] * 1e6)
        row["tflops" if arithmetic else "gbps"] = rate
        if arithmetic:
            ceiling = ceilings["gemm_tflops"].get("f32" if dtype == "f32" else "bf16" if dtype in ("bf16", "f16") else "")
        else:
            ceiling = ceilings["copy_gbps"]
        if ceiling:
            row["pct_of_ceiling"] = 100 * rate / ceiling
        if timer.cuda and row["median_ms"] < 0.1:
            row["host_us"], row["back_to_back_us"] = timer.host_overhead_us(work.run, 200)
    except (RuntimeError, TypeError, ValueError, AttributeError) as e:
        # NotImplementedError (a RuntimeError) and AttributeError (an op this torch lacks, e.g.
        # F.rms_norm before 2.4) mean the op is not available here.
        row["status"] = "unsupported" if isinstance(e, (NotImplementedError, AttributeError)) else "error"
        row["message"] = str(e).splitlines()[0] if str(e) else type(e).__name__
    timer.sync()
    return row


def run_ops(args):
    if not args.suite:
        fail("a suite file is required (recipes/bench/ops.toml) unless --alloc is given")
    cases = load_suite(args.suite)
    try:
        pattern = re.compile(args.filter or ".")
    except re.error as e:
        fail(f"--filter: {e}")
    selected = [(c, d) for c in cases if pattern.search(c["name"]) or pattern.search(c["op"])
                for d in c["dtypes"] if not args.dtype or d == args.dtype]
    if not selected:
        fail(f"no case of {args.suite} matches --filter {args.filter!r} and --dtype {args.dtype}")
    timer = Timer(args.device, args.flush_mib, args.flush_mode)
    if args.ceilings:
        with open(args.ceilings) as f:
            data = json.load(f)
        ceilings = data.get("ceilings", data)
    else:
        print(f"torch_ops.py: measuring the ceilings of {timer.name}", file=sys.stderr)
        ceilings = measure_ceilings(timer)
    print(f"# {timer.name} ({args.device}), torch {torch.__version__}: copy {ceilings['copy_gbps']:.4g} GB/s, "
          f"GEMM f32 {ceilings['gemm_tflops']['f32']:.3g} / bf16 {ceilings['gemm_tflops']['bf16']:.3g} TFLOP/s")
    rows = []
    for c, dtype in selected:
        r = run_case(c, dtype, timer, ceilings, args)
        rate = f"{r['tflops']:.3g} TFLOP/s" if r["tflops"] else fmt(r["gbps"], ".4g") + " GB/s"
        status = r["status"] + (f" (err {r['check_rel_err']:.1e})" if r["status"] == "ok" else f": {r['message']}")
        print(f"{c['name'][:38]:38} {dtype:5} {fmt(r['median_ms'], '9.4f'):>9} {fmt(r['p10_ms'], '9.4f'):>9} "
              f"{fmt(r['p90_ms'], '9.4f'):>9} {rate:>14} {fmt(r['pct_of_ceiling'], '6.1f'):>6} "
              f"{fmt(r['host_us'], '8.1f'):>8}  {status}", flush=True)
        rows.append(r)
    counts = {s: sum(r["status"] == s for r in rows) for s in ("ok", "FAIL", "unsupported", "error")}
    print(f"# {len(rows)} cases: " + ", ".join(f"{v} {k}" for k, v in counts.items()))
    out = header("genesis.bench.ops/1", timer.name, args.device)
    out.update(suite=args.suite, filter=args.filter or "", dtype=args.dtype,
               timing={"method": "cuda_events" if timer.cuda else "perf_counter", "flush_bytes": timer.flush_bytes,
                       "flush_mode": timer.flush_mode,
                       "max_reps": args.reps, "budget_ms": args.budget_ms, "statistic": "median"},
               ceilings=ceilings, cases=rows)
    write_json(args.json, out)
    return 1 if counts["FAIL"] + counts["error"] else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("suite", nargs="?", help="suite TOML (recipes/bench/ops.toml)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=sorted(DTYPES), help="run only this dtype of each case")
    p.add_argument("--filter", default="", help="regular expression on case names and op names")
    p.add_argument("--json", help="write the results as JSON")
    p.add_argument("--reps", type=int, default=100, help="most timed repetitions per case")
    p.add_argument("--budget-ms", type=float, default=300.0, help="time budget per case that sets the repetitions")
    p.add_argument("--flush-mib", type=int, default=None, help="cache flush buffer (0: none; default twice the L2)")
    p.add_argument("--flush-mode", choices=["read", "write"], default="read",
                   help="read the flush buffer (the cache ends clean) or write it (the cache ends dirty)")
    p.add_argument("--ceilings", help="read the ceilings from a genesis bench ceilings JSON instead of measuring")
    p.add_argument("--alloc", action="store_true", help="run the allocator scenarios instead of the suite")
    p.add_argument("--pairs", type=int, default=20000, help="allocation + free pairs of the simple alloc scenarios")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads (torch.set_num_threads; default: every CPU this process may use, as genesis)")
    args = p.parse_args()
    torch.set_num_threads(args.threads if args.threads > 0 else len(os.sched_getaffinity(0)))
    return run_alloc(args.device, args.pairs, args.json) if args.alloc else run_ops(args)


if __name__ == "__main__":
    sys.exit(main())
