"""The correctness oracle: softmax in float64, per-dtype tolerances, and the checks every variant and
config passes before it may be timed or chosen.

The reference is computed from the input *as stored* (already rounded to fp16 / bf16), upcast to
float64, so it matches what ``torch.softmax`` defines, NaN pattern included: a row holding NaN or +inf,
or made only of -inf, is all NaN; -inf entries in an otherwise finite row give 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# rtol covers the output rounding (half an ulp of the dtype) plus fp32 exp/accumulation error;
# atol lets tiny probabilities differ by less than the dtype can tell apart near zero.
TOLERANCE: dict[str, tuple[float, float]] = {  # dtype: (rtol, atol)
    "fp32": (1e-4, 1e-7),
    "fp16": (2e-3, 1e-5),
    "bf16": (1.6e-2, 1e-5),
}
ROW_SUM_TOLERANCE: dict[str, float] = {"fp32": 1e-4, "fp16": 5e-3, "bf16": 2e-2}
POISON = float("nan")  # outputs are filled with this before a run: any element left unwritten shows


@dataclass(frozen=True)
class CheckResult:
    ok: bool
    max_rel_error: float
    message: str = ""


def torch_dtype(dtype: str) -> Any:
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]


def random_input(m: int, n: int, dtype: str, device: Any = "cuda", scale: float = 4.0, generator: Any = None) -> Any:
    """Fresh normal logits with a per-row offset (rows must not all share one max), never zeros."""
    import torch

    x = torch.randn(m, n, device=device, dtype=torch.float32, generator=generator) * scale
    x += torch.randn(m, 1, device=device, dtype=torch.float32, generator=generator) * 10.0
    return x.to(torch_dtype(dtype))


def edge_input(n: int, dtype: str, device: Any = "cuda") -> Any:
    """Rows that stress the special cases torch.softmax defines, each of length n."""
    import torch

    inf, nan = float("inf"), float("nan")
    rows = []

    def row(fill: float, **at: float) -> Any:  # tensor ops on `device`, not Python lists: rows of 2^24 elements
        if fill is None:
            values = (torch.randn(n, device=device) * 3).to(torch.float64)
        else:
            values = torch.full((n,), fill, dtype=torch.float64, device=device)
        for index, value in at.items():
            values[int(index.lstrip("_")) % n] = value
        return values

    rows.append(row(-inf))  # all -inf: NaN row
    rows.append(row(None, _0=inf))  # one +inf: NaN row
    rows.append(row(None, _1=nan))  # one NaN: NaN row
    rows.append(row(None, _0=-inf))  # one -inf in finite row: that entry 0
    big = 6e4 if dtype == "fp16" else 1e30
    rows.append(row(None, _0=big, _2=-big))  # huge magnitudes
    rows.append(row(-inf, _3=0.0))  # one finite among -inf (online rescale from -inf)
    rows.append(row(None))  # ordinary
    return torch.stack(rows).to(torch_dtype(dtype))


def reference(x: Any) -> Any:
    """float64 softmax of x's stored values, on x's device."""
    import torch

    return torch.softmax(x.to(torch.float64), dim=-1)


# Rows are checked in blocks of about this many elements: the float64 reference and the comparison's
# temporaries take some 30 bytes an element, so a 2 GB bf16 tensor checked at once needed over 50 GB.
CHECK_BLOCK_ELEMENTS = 1 << 25


def check_softmax(out: Any, x: Any, dtype: str) -> CheckResult:
    """Compare ``out`` with the float64 reference: NaN pattern, elementwise tolerance, row sums.
    Works through blocks of whole rows (CHECK_BLOCK_ELEMENTS), so its memory stays bounded; the first
    failing block is reported, with its first row."""
    if out.shape != x.shape:
        return CheckResult(False, float("inf"), f"output shape {tuple(out.shape)} != input {tuple(x.shape)}")
    if x.numel() == 0:
        return CheckResult(True, 0.0)
    n = x.shape[-1] if x.dim() else 1
    rows_out, rows_x = out.reshape(-1, n), x.reshape(-1, n)
    step = max(1, CHECK_BLOCK_ELEMENTS // n)
    worst = 0.0
    for first in range(0, rows_x.shape[0], step):
        result = _check_rows(rows_out[first:first + step], rows_x[first:first + step], dtype)
        if not result.ok:
            where = f" (rows from {first})" if rows_x.shape[0] > step else ""
            return CheckResult(False, result.max_rel_error, result.message + where)
        worst = max(worst, result.max_rel_error)
    return CheckResult(True, worst)


def _check_rows(out: Any, x: Any, dtype: str) -> CheckResult:
    import torch

    rtol, atol = TOLERANCE[dtype]
    ref = reference(x)
    got = out.to(torch.float64)
    ref_nan = torch.isnan(ref)
    got_nan = torch.isnan(got)
    if not torch.equal(ref_nan, got_nan):
        unwritten = int((got_nan & ~ref_nan).sum())
        extra = int((~got_nan & ref_nan).sum())
        return CheckResult(
            False, float("inf"),
            f"{unwritten} element(s) NaN (unwritten or wrong) where the reference is finite, "
            f"{extra} finite where the reference is NaN",
        )
    finite = ~ref_nan
    err = (got - ref).abs()[finite]
    bound = atol + rtol * ref.abs()[finite]
    max_rel = float((err / (ref.abs()[finite] + atol)).max()) if err.numel() else 0.0
    if err.numel() and bool((err > bound).any()):
        worst = int((err - bound).argmax())
        return CheckResult(
            False, max_rel,
            f"{int((err > bound).sum())} element(s) outside rtol={rtol}, atol={atol}; worst |err|="
            f"{float(err[worst]):.3g} where the reference is {float(ref[finite][worst]):.3g}",
        )
    clean_rows = ~ref_nan.any(dim=-1)
    if bool(clean_rows.any()):
        # Off 1 by the tolerance, or off the row sum of the reference rounded to the output dtype
        # (the best a kernel can write) by it: a long fp16 row's many outputs below fp16's normal
        # range (6e-5) round to subnormals or 0, so even exact softmax rounded to fp16 sums to 1 -
        # 0.008 at N = 3 * 2^20 + 7 with randn * 3 rows (torch.softmax as well).
        sums = got[clean_rows].sum(dim=-1)
        rounded = ref[clean_rows].to(out.dtype).to(torch.float64).sum(dim=-1)
        worst_sum = float(torch.minimum((sums - 1.0).abs(), (sums - rounded).abs()).max())
        if worst_sum > ROW_SUM_TOLERANCE[dtype]:
            return CheckResult(False, max_rel, f"a row's sum is off 1 by {worst_sum:.3g}, tolerance {ROW_SUM_TOLERANCE[dtype]}")
    return CheckResult(True, max_rel)
