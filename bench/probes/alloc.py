"""Diagnostic: host time of the ways to allocate softmax()'s output on CUDA (torch.empty_like was
3.3-3.7 µs of the ~4-7 µs host overhead on H100 hosts). Wall time per call over 20,000 calls,
median of 7 rounds, for a few shapes. Usage (on a GPU): python -m bench.probes.alloc
"""
from __future__ import annotations

import json
import statistics
import time

import torch


def per_call_us(fn, calls: int = 20000, rounds: int = 7) -> float:
    results = []
    for _ in range(rounds):
        started = time.perf_counter()
        for _ in range(calls):
            fn()
        results.append((time.perf_counter() - started) / calls * 1e6)
    return statistics.median(results)


def main() -> None:
    for shape, dtype in (((1, 1024), torch.bfloat16), ((4096, 32000), torch.float16)):
        x = torch.randn(*shape, device="cuda").to(dtype)
        size, device = x.shape, x.device
        empty_like, empty, empty_strided = torch.empty_like, torch.empty, torch.empty_strided
        new_empty = x.new_empty
        stride = x.stride()
        row = {
            "shape": f"{dtype} {shape}",
            "empty_like": per_call_us(lambda: empty_like(x)),
            "empty_like(memory_format=contiguous)": per_call_us(lambda: empty_like(x, memory_format=torch.contiguous_format)),
            "empty(shape, dtype, device)": per_call_us(lambda: empty(size, dtype=dtype, device=device)),
            "empty_strided": per_call_us(lambda: empty_strided(size, stride, dtype=dtype, device=device)),
            "x.new_empty(shape)": per_call_us(lambda: new_empty(size)),
            "python loop floor (lambda: None)": per_call_us(lambda: None),
        }
        print(json.dumps({k: (round(v, 3) if isinstance(v, float) else v) for k, v in row.items()}), flush=True)


if __name__ == "__main__":
    main()
