"""The timing both data-parallel benchmarks share (torch_ddp.py, torch_fsdp.py): warm-up steps,
then timed steps between CUDA events, and the peak memory over the ranks."""
import statistics

import torch
import torch.distributed as dist


def time_steps(step, warmup, steps, dev):
    """Runs `step` (returns the loss) warmup + steps times; returns the median step in ms, the
    largest peak of allocated memory over the ranks in GiB, and the last loss."""
    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    events[0].record()
    for i in range(steps):
        loss = step()
        events[i + 1].record()
    torch.cuda.synchronize()
    ms = statistics.median(events[i].elapsed_time(events[i + 1]) for i in range(steps))
    peak = torch.tensor([torch.cuda.max_memory_allocated() / 2**30], device=dev)
    dist.all_reduce(peak, op=dist.ReduceOp.MAX)
    return ms, peak.item(), loss
