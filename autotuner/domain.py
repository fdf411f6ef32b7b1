"""The values every layer above ``kernels`` shares, in one place. Pure constants: the embedded lookup
imports this module too. Dtype names live with the kernels (``kernels.base.DTYPES``,
``normalize_dtype``), since a variant declares the dtypes it runs.

``MAX_DIM``: the largest M or N anything accepts, inclusive. 2**31 - 1 because the database stores M
and N as 32-bit signed integers; the lookup, the grids, the exchange format and the service all
accept exactly 0 <= M <= MAX_DIM (the service: 1 <= M) and 1 <= N <= MAX_DIM.
"""
from __future__ import annotations

MAX_DIM = 2**31 - 1
TIMING_METHODS: tuple[str, ...] = ("cold", "warm", "graph")  # cold: L2 flushed; warm; graph: CUDA graph replay
