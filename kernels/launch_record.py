"""Recording of kernel launches, shared by the CUDA (``kernels.cuda.loader``) and Triton
(``kernels.triton_impl.launch``) launch layers.

``recording(calls)`` makes every launch of the calling thread append a record to ``calls``: the
layer's replayable launch object (``CudaLaunch``, ``TritonLaunch``), or None for a launch that went
through a path that cannot be replayed (CuPy's ``RawKernel.__call__``, Triton's JIT). The runtime
records a build's launches once per (device, shape, dtype) and replays them bound to new pointers;
``scripts/bench_runtime.py`` replays them as recorded for its raw-launch baseline. Outside a
recording a launch pays one dict truth test: ``if taps: tap(record)``.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Iterator

taps: dict[int, list] = {}  # thread ident -> the list recording that thread's launches


def tap(record: Any) -> None:
    """Append ``record`` to the calling thread's recording, if it has one."""
    calls = taps.get(threading.get_ident())
    if calls is not None:
        calls.append(record)


@contextmanager
def recording(calls: list) -> Iterator[list]:
    """Record this thread's launches (CUDA and Triton alike) into ``calls`` while active."""
    ident = threading.get_ident()
    previous = taps.get(ident)
    taps[ident] = calls
    try:
        yield calls
    finally:
        if previous is None:
            del taps[ident]
        else:
            taps[ident] = previous
