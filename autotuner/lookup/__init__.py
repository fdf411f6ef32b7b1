"""The embedded lookup: dispatch tables, ``select_kernel``, GPU model names. Imports neither torch,
CuPy, ``db`` nor any other part of ``autotuner`` (the layer test checks it)."""
