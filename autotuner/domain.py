"""The values every layer above ``kernels`` shares, in one place. Pure constants: the embedded lookup
imports this module too. Dtype names live with the kernels (``kernels.base.DTYPES``,
``normalize_dtype``), since a variant declares the dtypes it runs.

``MAX_DIM``: the largest M or N anything accepts, inclusive. 2**31 - 1 because the database stores M
and N as 32-bit signed integers; the lookup, the grids, the exchange format and the service all
accept exactly 0 <= M <= MAX_DIM (the service: 1 <= M) and 1 <= N <= MAX_DIM.
"""
from __future__ import annotations

MAX_DIM = 2**31 - 1
# The shape domain the dispatch answers for (docs/SWEEP.md): M from 0 to DOMAIN_M_MAX, N from 1 to
# DOMAIN_N_MAX. softmax is correct beyond it (up to MAX_DIM); the sweep samples inside it.
DOMAIN_M_MAX = 1 << 20
DOMAIN_N_MAX = 1 << 24
TIMING_METHODS: tuple[str, ...] = ("cold", "warm", "graph")  # cold: L2 flushed; warm; graph: CUDA graph replay
