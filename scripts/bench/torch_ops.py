#!/usr/bin/env python3
"""PyTorch side of `genesis bench`: the same cases, timing method and JSON schema.

    genesis bench ops --suite recipes/bench/ops.toml --emit-cases cases.json
    scripts/bench/torch_ops.py cases.json --device cuda --dtype bf16 --json torch_bf16.json
    scripts/bench/torch_ops.py --alloc --device cuda --json torch_alloc.json
    genesis bench compare genesis_bf16.json torch_bf16.json

The cases come resolved from genesis's op-case registry (libgenesis/ops/op_cases.h): each names
its inputs (shape, kind, index bound, whether it takes a gradient), the PyTorch expression of
the call (over x, the inputs, and a, the case's arguments) and its cost per dtype, so nothing
about an op is written twice.

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
import zlib

import torch
import torch.nn.functional as F

from torch_alloc import cpu_model_name, fmt, header, run_alloc, write_json

DTYPES = {"f32": torch.float32, "f64": torch.float64, "f16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = {"f64": 1e-9, "f32": 1e-3, "f16": 1e-2, "bf16": 2e-2}
CASE_KEYS = {"name", "op", "table_op", "shapes", "dtypes", "backward", "axes", "dim", "scalar", "variant",
             "check_rows", "tolerance", "where", "inputs", "torch", "cost", "row_inputs", "random"}


def fail(message):
    print(f"torch_ops.py: error: {message}", file=sys.stderr)
    sys.exit(2)


# --- the cases --------------------------------------------------------------------------

def load_cases(path):
    if path.endswith(".toml"):
        fail(f"{path} is a suite file: resolve it first with `genesis bench ops --suite {path} --emit-cases "
             "cases.json` and pass cases.json")
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        fail(f"cannot read cases {path}: {e}")
    except json.JSONDecodeError as e:
        fail(f"cases {path}: not JSON ({e})")
    if data.get("schema") != "genesis.bench.cases/1":
        fail(f"cases {path}: schema {data.get('schema')!r}, expected 'genesis.bench.cases/1' (genesis bench ops --emit-cases)")
    cases = data.get("cases", [])
    for c in cases:
        missing = CASE_KEYS - set(c)
        if missing:
            fail(f"cases {path}: case {c.get('name', '?')!r} lacks {sorted(missing)}")
        c["call"] = None if c["torch"] is None else compile_call(c)
    if not cases:
        fail(f"cases {path}: no cases")
    return data.get("suite", path), cases


def numel(shape):
    return math.prod(shape)


def compile_call(c):
    """The case's expression as a function of (x, dtype, device), compiled once: the timed loop
    pays one Python call, as it did for hand-written lambdas."""
    args = {k: c[k] for k in ("shapes", "axes", "dim", "scalar", "variant")}
    code = compile(f"lambda x, dtype, device: ({c['torch']})", f"<case {c['name']}>", "eval")
    return eval(code, {"torch": torch, "F": F, "math": math, "a": args})


def forward(c, x, dtype, device):
    return c["call"](x, dtype, device)


# --- workloads --------------------------------------------------------------------------

def seed_of(name):
    return zlib.crc32(name.encode())


def draw(spec, dtype, device, gen):
    shape, kind = spec["shape"], spec["kind"]
    if kind == "index":
        return torch.randint(0, spec["bound"], shape, device=device, generator=gen)
    if kind == "mask":
        return torch.rand(shape, device=device, generator=gen) < 0.5
    t = torch.rand(shape, device=device, generator=gen) if kind in ("positive", "probability") else \
        torch.randn(shape, device=device, generator=gen)
    if kind == "positive":
        t = t * 1.5 + 0.5
    elif kind == "probability":
        t = t * 0.9 + 0.05
    return t.to(dtype).requires_grad_(spec["grad"])


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
        self.specs = c["inputs"]
        self.gen = torch.Generator(device=device).manual_seed(seed_of(c["name"]))
        nbytes = sum(numel(s["shape"]) for s in self.specs) * torch.empty((), dtype=self.dtype).element_size()
        sets = 4 if nbytes * 4 < cache_bytes else 1
        self.sets = [[draw(s, self.dtype, device, self.gen) for s in self.specs] for _ in range(sets)]
        self.grad_out = None

    def forward(self, x, reference=False):
        # Cases without inputs (factories) take the dtype and device: float64 on the CPU for the reference.
        return forward(self.c, x, torch.float64 if reference else self.dtype, "cpu" if reference else self.device)

    def outputs(self, x, grad_out, reference=False):
        if not self.c["backward"]:
            with torch.no_grad():
                return [self.forward(x, reference)]
        for t in x:
            t.grad = None
        out = self.forward(x, reference)
        out.backward(grad_out)
        return [out.detach()] + [t.grad for t in x if t.requires_grad]

    def check(self):
        x = self.sets[0]
        if self.c["backward"]:  # the output gradient of the timed backward
            with torch.no_grad():
                probe = self.forward(x)
            if probe.dim() > 0:
                self.grad_out = torch.randn(probe.shape, device=self.device, generator=self.gen).to(self.dtype)
        if self.c["random"]:  # random outputs (dropout, rand): the shape is the check
            with torch.no_grad():
                same = self.forward(x).shape == self.forward([reference_copy(t) for t in x], True).shape
            return 0.0 if same else math.nan
        if self.c["check_rows"] > 0 and self.c["row_inputs"]:  # the forward's rows only
            return self.check_rows()
        got = self.outputs(x, self.grad_out)
        ref_in = [reference_copy(t, spec["grad"]) for t, spec in zip(x, self.specs)]
        ref = self.outputs(ref_in, None if self.grad_out is None else reference_copy(self.grad_out), True)
        return max(relative_error(a, b) for a, b in zip(got, ref))

    def check_rows(self):
        x = self.sets[0]
        with torch.no_grad():
            out = self.forward(x)
            rows, half = out.shape[0], max(1, self.c["check_rows"] // 2)
            blocks = [(0, min(rows, half))]
            if rows > 2 * half:
                blocks.append((rows - half, half))
            elif rows > half:
                blocks[0] = (0, rows)
            worst = 0.0
            for start, count in blocks:
                ref_in = [reference_copy(t.narrow(0, start, count) if i in self.c["row_inputs"] else t)
                          for i, t in enumerate(x)]
                err = relative_error(out.narrow(0, start, count), self.forward(ref_in, True))
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

def cpu_cache_bytes():
    """The largest cache this CPU shares, as genesis bench reads it (sysfs, else sysconf's L3,
    else 32 MiB)."""
    best_level, best = 0, 0
    for index in range(8):
        d = f"/sys/devices/system/cpu/cpu0/cache/index{index}/"
        try:
            level, size = int(open(d + "level").read()), open(d + "size").read().strip()
        except (OSError, ValueError):
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
        digits = size.rstrip("KM")
        if digits.isdigit() and level > best_level and int(digits) > 0:
            best_level, best = level, int(digits) * scale
    if best:
        return best
    l3 = os.sysconf("SC_LEVEL3_CACHE_SIZE") if "SC_LEVEL3_CACHE_SIZE" in os.sysconf_names else 0
    return l3 if l3 > 0 else 32 << 20


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
            self.cache_bytes = cpu_cache_bytes()
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
    nbytes, flops = c["cost"][dtype]["bytes"], c["cost"][dtype]["flops"]
    tol = c["tolerance"] or TOLERANCE[dtype]
    row = {"name": c["name"], "op": c["op"], "shapes": c["shapes"], "dtype": dtype, "backward": c["backward"],
           "where": c["where"], "bytes": nbytes, "flops": flops, "tolerance": tol, "status": "ok", "message": None,
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
        # NotImplementedError (a RuntimeError), AttributeError (an op this torch lacks, e.g.
        # F.rms_norm before 2.4) and "... not implemented for 'BFloat16'" mean the op is not available here.
        unsupported = isinstance(e, (NotImplementedError, AttributeError)) or "not implemented for" in str(e)
        row["status"] = "unsupported" if unsupported else "error"
        row["message"] = str(e).splitlines()[0] if str(e) else type(e).__name__
    timer.sync()
    return row


def run_ops(args):
    if not args.cases:
        fail("a cases file is required (genesis bench ops --emit-cases) unless --alloc is given")
    suite, cases = load_cases(args.cases)
    try:
        pattern = re.compile(args.filter or ".")
    except re.error as e:
        fail(f"--filter: {e}")
    selected = [(c, d) for c in cases if pattern.search(c["name"]) or pattern.search(c["op"])
                for d in c["dtypes"] if not args.dtype or d == args.dtype]
    if not selected:
        fail(f"no case of {args.cases} matches --filter {args.filter!r} and --dtype {args.dtype}")
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
    out.update(suite=suite, filter=args.filter or "", dtype=args.dtype,
               cpu_threads=None if timer.cuda else torch.get_num_threads(),
               timing={"method": "cuda_events" if timer.cuda else "perf_counter", "flush_bytes": timer.flush_bytes,
                       "flush_mode": timer.flush_mode,
                       "max_reps": args.reps, "budget_ms": args.budget_ms, "statistic": "median"},
               ceilings=ceilings, cases=rows)
    write_json(args.json, out)
    return 1 if counts["FAIL"] + counts["error"] else 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", nargs="?", help="cases JSON of `genesis bench ops --suite S --emit-cases FILE`")
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
