"""Device helpers (``@triton.jit``) shared by the tiled Triton kernels: row windows, tile loads and
stores, and the online (max, sum) recurrence.

Row window. Row ``r`` starts at element ``r * N``, which is 16-element aligned only when N is. Every
tiled kernel therefore addresses a row through a *window*: a base offset rounded down to a multiple of
16 elements and the half-open range ``[lo, hi)`` of the row inside it (``lo < 16``). Tiles start at
multiples of BLOCK in window coordinates, so every tile is 16-element aligned whatever N is, and only
the first and last tile of a range need a mask. Interior tiles load and store unmasked, which lets
Triton emit 16-byte vector accesses; with STAGES > 1 the interior loops are software pipelined
(cp.async prefetch of STAGES - 1 tiles into shared memory: Triton pipelines these loops only when
``tl.range`` is given ``num_stages``, the kernel-wide option leaves them alone). With ``ALIGNED``
(N % 16 == 0, the common case) the window is the row itself and ``lo`` is the constant 0.

Special values follow torch.softmax: masked lanes read -inf; a NaN or +inf anywhere in a row, or a
row of only -inf, gives a row of NaN (the sums become NaN or 0, and 0 * inf = NaN at the end).

Online recurrence, per lane. The running max starts at -FLT_MAX, not -inf, so that ``x - m`` is never
``-inf - (-inf)``: a lane that only saw -inf keeps (m, s) = (-FLT_MAX, 0), which merges as an exact
zero. Each element costs one exp2: ``p = exp2(-|x - m| * log2 e)`` is either the new element's
weight (x <= m) or the rescale of the old sum (x > m, then the new element weighs exactly 1).
"""
from __future__ import annotations

import triton
import triton.language as tl

LOG2E = tl.constexpr(1.4426950408889634)
NEG_BIG = tl.constexpr(-3.4028234663852886e38)  # -FLT_MAX: the online max before any element


@triton.jit
def row_window(row, N, ALIGNED: tl.constexpr):
    """(window base offset, lo, hi) of ``row``; the base is a multiple of 16 elements."""
    base = tl.cast(row, tl.int64) * N
    if ALIGNED:
        start = base
        lo = 0
    else:
        start = (base // 16) * 16
        lo = (base - start).to(tl.int32)
    return start, lo, lo + N


@triton.jit
def load_tile(ptr, t, lo, hi, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    """Elements ``[t, t + BLOCK)`` of a window as fp32; with MASKED, lanes outside [lo, hi) are -inf."""
    idx = t + tl.arange(0, BLOCK)
    if MASKED:
        x = tl.load(ptr + idx, mask=(idx >= lo) & (idx < hi), other=float("-inf"))
    else:
        x = tl.load(ptr + idx)
    return x.to(tl.float32)


@triton.jit
def store_tile(ptr, t, lo, hi, y, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    idx = t + tl.arange(0, BLOCK)
    if MASKED:
        tl.store(ptr + idx, y.to(ptr.dtype.element_ty), mask=(idx >= lo) & (idx < hi))
    else:
        tl.store(ptr + idx, y.to(ptr.dtype.element_ty))


@triton.jit
def tile_bounds(a, b, BLOCK: tl.constexpr):
    """For the range [a, b): the first and one-past-last full tile starts (multiples of BLOCK)."""
    t_first = ((a + BLOCK - 1) // BLOCK) * BLOCK
    t_last = (b // BLOCK) * BLOCK
    return t_first, t_last


@triton.jit
def online_update(m, s, x):
    """Fold one tile into the per-lane running (max, sum); see the module docstring."""
    grows = x > m
    p = tl.exp2(-tl.abs(x - m) * LOG2E)
    s = tl.where(grows, s * p + 1.0, s + p)
    m = tl.where(grows, x, m)
    return m, s


@triton.jit
def merge_lanes(m, s):
    """Row (max, sum) from per-lane partials. A lane at +inf max turns the sum into NaN (inf - inf),
    which is what torch gives for a row holding +inf."""
    big_m = tl.max(m, axis=0)
    big_s = tl.sum(s * tl.exp2((m - big_m) * LOG2E), axis=0)
    return big_m, big_s


@triton.jit
def window_online(ptr, a, b, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    """Per-lane online (max, sum) over elements [a, b) of a window, reading left to right."""
    m = tl.full([BLOCK], NEG_BIG, tl.float32)
    s = tl.zeros([BLOCK], tl.float32)
    t_first, t_last = tile_bounds(a, b, BLOCK)
    if a < t_first:  # head tile: the range starts inside it
        m, s = online_update(m, s, load_tile(ptr, t_first - BLOCK, a, b, BLOCK, True))
    for i in tl.range(0, (t_last - t_first) // BLOCK, num_stages=STAGES):
        m, s = online_update(m, s, load_tile(ptr, t_first + i * BLOCK, a, b, BLOCK, False))
    if (t_last < b) & (t_last >= t_first):  # tail tile
        m, s = online_update(m, s, load_tile(ptr, t_last, a, b, BLOCK, True))
    return m, s


@triton.jit
def window_max(ptr, a, b, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    """Per-lane max over [a, b), left to right."""
    m = tl.full([BLOCK], float("-inf"), tl.float32)
    t_first, t_last = tile_bounds(a, b, BLOCK)
    if a < t_first:
        m = tl.maximum(m, load_tile(ptr, t_first - BLOCK, a, b, BLOCK, True))
    for i in tl.range(0, (t_last - t_first) // BLOCK, num_stages=STAGES):
        m = tl.maximum(m, load_tile(ptr, t_first + i * BLOCK, a, b, BLOCK, False))
    if (t_last < b) & (t_last >= t_first):
        m = tl.maximum(m, load_tile(ptr, t_last, a, b, BLOCK, True))
    return m


@triton.jit
def window_sum_exp(ptr, a, b, big_m, BLOCK: tl.constexpr, STAGES: tl.constexpr):
    """Per-lane sum of exp(x - big_m) over [a, b), right to left: the tiles read last by the
    previous pass are still in L2."""
    s = tl.zeros([BLOCK], tl.float32)
    t_first, t_last = tile_bounds(a, b, BLOCK)
    if (t_last < b) & (t_last >= t_first):
        s += tl.exp2((load_tile(ptr, t_last, a, b, BLOCK, True) - big_m) * LOG2E)
    n_full = (t_last - t_first) // BLOCK
    for i in tl.range(0, n_full, num_stages=STAGES):
        s += tl.exp2((load_tile(ptr, t_last - (i + 1) * BLOCK, a, b, BLOCK, False) - big_m) * LOG2E)
    if a < t_first:
        s += tl.exp2((load_tile(ptr, t_first - BLOCK, a, b, BLOCK, True) - big_m) * LOG2E)
    return s


@triton.jit
def _normalize_tile(x_ptr, y_ptr, t, a, b, big_m, inv_s, BLOCK: tl.constexpr, MASKED: tl.constexpr):
    x = load_tile(x_ptr, t, a, b, BLOCK, MASKED)
    store_tile(y_ptr, t, a, b, tl.exp2((x - big_m) * LOG2E) * inv_s, BLOCK, MASKED)


@triton.jit
def window_normalize(x_ptr, y_ptr, a, b, big_m, inv_s, BLOCK: tl.constexpr, STAGES: tl.constexpr,
                     REVERSE: tl.constexpr):
    """y = exp(x - big_m) * inv_s over [a, b); REVERSE walks right to left (see window_sum_exp)."""
    t_first, t_last = tile_bounds(a, b, BLOCK)
    n_full = (t_last - t_first) // BLOCK
    has_head = a < t_first
    has_tail = (t_last < b) & (t_last >= t_first)
    if REVERSE:
        if has_tail:
            _normalize_tile(x_ptr, y_ptr, t_last, a, b, big_m, inv_s, BLOCK, True)
        for i in tl.range(0, n_full, num_stages=STAGES):
            _normalize_tile(x_ptr, y_ptr, t_last - (i + 1) * BLOCK, a, b, big_m, inv_s, BLOCK, False)
        if has_head:
            _normalize_tile(x_ptr, y_ptr, t_first - BLOCK, a, b, big_m, inv_s, BLOCK, True)
    else:
        if has_head:
            _normalize_tile(x_ptr, y_ptr, t_first - BLOCK, a, b, big_m, inv_s, BLOCK, True)
        for i in tl.range(0, n_full, num_stages=STAGES):
            _normalize_tile(x_ptr, y_ptr, t_first + i * BLOCK, a, b, big_m, inv_s, BLOCK, False)
        if has_tail:
            _normalize_tile(x_ptr, y_ptr, t_last, a, b, big_m, inv_s, BLOCK, True)
