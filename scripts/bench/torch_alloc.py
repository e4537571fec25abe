"""Allocator scenarios of `scripts/bench/torch_ops.py --alloc`: the same sizes as
apps/genesis/bench_alloc.cpp, timed through PyTorch's caching allocator (torch.empty, then
dropping the tensor) and through raw cudaMalloc/cudaFree (malloc/free on the CPU) via ctypes.
Also the output helpers torch_ops.py shares.
"""
import ctypes
import glob
import json
import math
import os
import sys
import time

import torch


def cpu_model_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def fmt(v, spec):
    return "-" if not isinstance(v, (int, float)) else format(v, spec)


def header(schema, device_name, device):
    return {"schema": schema, "tool": "torch", "tool_version": torch.__version__, "device": device,
            "device_name": device_name}


def write_json(path, obj):
    if path:
        with open(path, "w") as f:
            json.dump(obj, f, indent=2)
            f.write("\n")


class SizeStream:
    def __init__(self, seed):
        self.state = seed

    def uniform(self):
        self.state = (self.state * 6364136223846793005 + 1442695040888963407) & 0xFFFFFFFFFFFFFFFF
        return (self.state >> 11) / 9007199254740992.0

    def log_uniform(self, lo, hi):
        l, h = math.log(lo), math.log(hi)
        return max(512, int(math.exp(l + self.uniform() * (h - l))) // 512 * 512)

    def index(self, n):
        return min(n - 1, int(self.uniform() * n))


def same_size(b, nbytes, pairs):
    b.free(b.alloc(nbytes))
    t0 = time.perf_counter()
    for _ in range(pairs):
        b.free(b.alloc(nbytes))
    return 1e9 * (time.perf_counter() - t0) / pairs


def transformer_sizes(tokens):
    sizes = []
    for _ in range(12):
        sizes += [tokens * w * 2 for w in (768, 3 * 768, 768, 4 * 768, 4 * 768, 768)] + [tokens * 4, tokens * 4]
    return sizes


def transformer(b, tokens, iterations):
    sizes = transformer_sizes(tokens)

    def step():
        live = [b.alloc(s) for s in sizes]
        while live:
            b.free(live.pop())

    step()
    t0 = time.perf_counter()
    for _ in range(iterations):
        step()
    return 1e9 * (time.perf_counter() - t0) / (iterations * len(sizes))


def random_window(b, lo, hi, window, live_cap, pairs, seed):
    rng = SizeStream(seed)
    live, live_bytes = [], 0

    def draw():
        return min(rng.log_uniform(lo, hi), live_cap - live_bytes if live_bytes + 512 < live_cap else 512)

    while len(live) < window and live_bytes < live_cap:
        s = draw()
        live.append((b.alloc(s), s))
        live_bytes += s
    t0 = time.perf_counter()
    for _ in range(pairs):
        k = rng.index(len(live))
        live_bytes -= live[k][1]
        b.free(live[k][0])
        live[k] = None  # drops the last reference: the torch backend frees here
        s = draw()
        live[k] = (b.alloc(s), s)
        live_bytes += s
    ns = 1e9 * (time.perf_counter() - t0) / pairs
    while live:
        b.free(live.pop()[0])
    return ns


class TorchBackend:
    """torch.empty / dropping the last reference: the caching allocator's host cost."""

    def __init__(self, device):
        self.device = device

    def alloc(self, n):
        return torch.empty(n, dtype=torch.uint8, device=self.device)

    def free(self, handle):
        del handle


class RawCudaBackend:
    def __init__(self):
        self.lib = load_cudart()
        self.lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        self.lib.cudaFree.argtypes = [ctypes.c_void_p]

    def alloc(self, n):
        p = ctypes.c_void_p()
        if self.lib.cudaMalloc(ctypes.byref(p), n) != 0:
            raise RuntimeError(f"cudaMalloc({n}) failed")
        return p

    def free(self, p):
        if self.lib.cudaFree(p) != 0:
            raise RuntimeError("cudaFree failed")


class RawCpuBackend:
    def __init__(self):
        self.libc = ctypes.CDLL(None)
        self.libc.malloc.restype = ctypes.c_void_p
        self.libc.malloc.argtypes = [ctypes.c_size_t]
        self.libc.free.argtypes = [ctypes.c_void_p]

    def alloc(self, n):
        return self.libc.malloc(n)

    def free(self, p):
        self.libc.free(p)


def load_cudart():
    candidates = ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    for root in sys.path + [os.path.dirname(torch.__file__)]:
        candidates += glob.glob(os.path.join(root, "nvidia", "cu*", "lib", "libcudart.so*"))
        candidates += glob.glob(os.path.join(root, "nvidia", "cuda_runtime", "lib", "libcudart.so*"))
        candidates += glob.glob(os.path.join(root, "lib", "libcudart*.so*"))
    for name in candidates:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise RuntimeError("libcudart not found for the raw cudaMalloc/cudaFree comparison")


def run_alloc(device, pairs, json_path):
    dev = torch.device(device)
    gpu = dev.type == "cuda"
    device_name = torch.cuda.get_device_properties(dev).name if gpu else cpu_model_name()
    raw_pairs = max(10, pairs // 20)
    tokens = 8192 if gpu else 512
    mib = 1 << 20
    cap = (4 << 30) if gpu else 256 * mib
    hi = 256 * mib if gpu else 16 * mib
    scenarios = [
        ("same_1MiB", "1 MiB allocated and freed repeatedly", lambda b, n: same_size(b, mib, n), pairs, raw_pairs),
        ("large_64MiB", "64 MiB allocated and freed repeatedly", lambda b, n: same_size(b, 64 * mib, n), pairs, raw_pairs),
        ("transformer", f"12-layer activations ({tokens} tokens, d 768, bf16) forward, freed in reverse",
         lambda b, n: transformer(b, tokens, n), max(2, pairs // 500), max(1, raw_pairs // 100)),
        ("pressure", f"random live set held near {cap // mib} MiB (the cap under torch)",
         lambda b, n: random_window(b, cap // 1024, cap // 16, 1 << 20, cap * 8 // 10, n, 11), pairs // 4, raw_pairs),
        ("random_sizes", f"16 live blocks, log-uniform 512 B to {hi // mib} MiB",
         lambda b, n: random_window(b, 512, hi, 16, 1 << 62, n, 12), pairs, raw_pairs),
    ]
    cached = TorchBackend(dev)
    try:
        raw = RawCudaBackend() if gpu else RawCpuBackend()
    except (OSError, RuntimeError) as e:
        print(f"torch_ops.py: no raw allocator comparison: {e}", file=sys.stderr)
        raw = None
    rows = []
    print(f"{'scenario':14} {'torch ns':>12} {'raw ns':>12} {'raw/torch':>9}  what")
    for name, what, fn, n, n_raw in scenarios:
        row = {"name": name, "description": what, "pairs": n, "raw_pairs": n_raw}
        try:
            if gpu and name == "pressure":
                torch.cuda.empty_cache()
                index = torch.device(dev).index or 0
                total = torch.cuda.get_device_properties(index).total_memory
                torch.cuda.set_per_process_memory_fraction(cap / total, index)
                try:
                    row["allocator_ns"] = fn(cached, n)
                finally:
                    torch.cuda.set_per_process_memory_fraction(1.0, index)
            else:
                row["allocator_ns"] = fn(cached, n)
            if raw is not None:
                row["raw_ns"] = fn(raw, n_raw)
                row["raw_over_allocator"] = row["raw_ns"] / row["allocator_ns"]
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            row["error"] = str(e).splitlines()[0]
        rows.append(row)
        print(f"{name:14} {fmt(row.get('allocator_ns'), '12.0f'):>12} {fmt(row.get('raw_ns'), '12.0f'):>12} "
              f"{fmt(row.get('raw_over_allocator'), '8.1f'):>8}x  {row.get('error', what)}", flush=True)
    out = header("genesis.bench.alloc/1", device_name, device)
    out["scenarios"] = rows
    write_json(json_path, out)
    return 0
