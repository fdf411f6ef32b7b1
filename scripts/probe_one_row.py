"""Diagnostic: why Liger's one-block Triton softmax beat ``triton_one_row`` by 0.1-0.4 µs on small
shapes in bench run 10 (all 28 of the bench's misses against the best peer). Times, with the
sweep's cold-L2 timer, ``triton_one_row``'s kernel and variants of it that each take one of Liger's
differences (load ``.ca``, store ``.cs``, 32-bit row offset, division by the sum), Liger's own kernel
where ``liger_kernel`` imports, and the copy reference, each at its best num_warps of a small set;
every output is checked against float64 first.
Usage (on a GPU): python scripts/probe_one_row.py [--out FILE]
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autotuner.tune.measure import copy_reference  # noqa: E402
from autotuner.tune.timing import Timer  # noqa: E402
from kernels.reference import check_softmax, random_input  # noqa: E402
from kernels.triton_impl.one_row import _one_row_kernel  # noqa: E402
from kernels.triton_impl.tiles import LOG2E  # noqa: E402

M_VALUES = (1, 4, 32, 128, 1024)
N_VALUES = (1024, 2048, 4096, 8192, 16384)
WARPS = {1024: (4,), 2048: (4, 8), 4096: (4, 8), 8192: (8, 16), 16384: (8, 16)}
EXTRA_SHAPES = (("fp32", 16384, 2048),)


@triton.jit
def _variant_kernel(x_ptr, y_ptr, N, BLOCK: tl.constexpr, LOAD_CA: tl.constexpr, STORE_CS: tl.constexpr,
                    OFFSET_64: tl.constexpr, DIVIDE: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    mask = cols < N
    if OFFSET_64:
        offset = tl.cast(tl.program_id(0), tl.int64) * N
    else:
        offset = tl.program_id(0) * N
    if LOAD_CA:
        x = tl.load(x_ptr + offset + cols, mask=mask, other=float("-inf"), cache_modifier=".ca").to(tl.float32)
    else:
        x = tl.load(x_ptr + offset + cols, mask=mask, other=float("-inf")).to(tl.float32)
    p = tl.exp2((x - tl.max(x, axis=0)) * LOG2E)
    if DIVIDE:
        y = p / tl.sum(p, axis=0)
    else:
        y = p * (1.0 / tl.sum(p, axis=0))
    if STORE_CS:
        tl.store(y_ptr + offset + cols, y.to(y_ptr.dtype.element_ty), mask=mask, cache_modifier=".cs")
    else:
        tl.store(y_ptr + offset + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


# (LOAD_CA, STORE_CS, OFFSET_64, DIVIDE)
VARIANTS = {
    "store_cs": (False, True, True, False),
    "load_ca_store_cs": (True, True, True, False),
    "offset32_store_cs": (False, True, False, False),
    "liger_like": (True, True, False, True),
}


def launchers(x, out, n: int, warps: int) -> dict:
    block = triton.next_power_of_2(n)
    m = x.shape[0]
    calls = {"one_row": lambda: _one_row_kernel[(m,)](x, out, n, BLOCK=block, num_warps=warps, num_stages=1)}
    for name, (ca, cs, wide, divide) in VARIANTS.items():
        calls[name] = (lambda ca=ca, cs=cs, wide=wide, divide=divide: _variant_kernel[(m,)](
            x, out, n, BLOCK=block, LOAD_CA=ca, STORE_CS=cs, OFFSET_64=wide, DIVIDE=divide,
            num_warps=warps, num_stages=1))
    try:
        from liger_kernel.ops.softmax import _softmax_single_block_forward_kernel as liger
    except ImportError:
        return calls
    calls["liger_kernel"] = lambda: liger[(m,)](out, out.stride(0), x, x.stride(0), n, BLOCK_SIZE=block,
                                                num_warps=warps)
    return calls


def probe_shape(timer: Timer, dtype: str, m: int, n: int) -> dict:
    x = random_input(m, n, dtype)
    out = torch.empty_like(x)
    row: dict = {"dtype": dtype, "m": m, "n": n, "copy_us": copy_reference(timer, x, out).median_us}
    for warps in WARPS.get(n, (4, 8)):
        for name, call in launchers(x, out, n, warps).items():
            out.fill_(float("nan"))
            call()
            torch.cuda.synchronize()
            check = check_softmax(out, x, dtype)
            if not check.ok:
                row.setdefault("wrong", []).append(f"{name}[{warps}]: {check.message}")
                continue
            us = timer.time(call).median_us
            if us < row.get(name, (math.inf,))[0]:
                row[name] = (round(us, 3), warps)
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    timer = Timer("cold", time_cap_s=0.2)
    rows = []
    shapes = [(d, m, n) for d in ("fp32", "fp16", "bf16") for m in M_VALUES for n in N_VALUES] + list(EXTRA_SHAPES)
    for dtype, m, n in shapes:
        row = probe_shape(timer, dtype, m, n)
        rows.append(row)
        print(json.dumps(row), flush=True)
    names = [k for k in rows[0] if isinstance(rows[0][k], tuple)]
    summary = {}
    for name in names:
        ratios = [r[name][0] / r["one_row"][0] for r in rows if name in r and "one_row" in r]
        summary[name] = {"geomean_vs_one_row": round(math.exp(sum(map(math.log, ratios)) / len(ratios)), 4),
                         "faster_by_3pct": sum(q < 0.97 for q in ratios), "slower_by_3pct": sum(q > 1.03 for q in ratios),
                         "shapes": len(ratios)}
    print(json.dumps({"summary": summary, "device": torch.cuda.get_device_name()}), flush=True)
    if args.out:
        args.out.write_text(json.dumps({"rows": rows, "summary": summary, "device": torch.cuda.get_device_name()}, indent=1))


if __name__ == "__main__":
    main()
