"""Stand-ins for the GPU side, for CPU tests: a replaying measurer and deliberately failing ones.

``ReplayMeasurer`` answers each work item from a table of recorded results (real GPU measurements in
the replay tests); the faulty measurers imitate what a faulting or hanging kernel does to a worker.
"""
from __future__ import annotations

import os
import time
from typing import Any

from autotuner.measure import WorkItem, failure


class ReplayMeasurer:
    def __init__(self, recorded: dict[tuple, dict[str, Any]] | None = None):
        self.recorded = recorded or {}
        self.calls: list[WorkItem] = []

    def measure(self, item: WorkItem) -> dict[str, Any]:
        self.calls.append(item)
        key = item.identity
        if key in self.recorded:
            return dict(self.recorded[key])
        return failure("launch_error", f"nothing recorded for {key}")


class FaultyMeasurer:
    """Worker-side measurer whose behaviour depends on the variant name:
    ``segfault`` kills the process, ``hang`` never answers, ``fatal`` reports a poisoned context,
    anything else returns a fixed ok timing tagged with the worker's pid."""

    def __init__(self, method: str, time_cap_s: float = 0.5):
        self.method = method

    def measure(self, item: WorkItem) -> dict[str, Any]:
        if item.variant == "segfault":
            os._exit(139)
        if item.variant == "hang":
            time.sleep(3600)
        if item.variant == "fatal":
            return failure("fault", "CUDA error: an illegal memory access was encountered", fatal=True)
        return {"status": "ok", "median_us": 10.0 + item.n / 1000, "p20_us": 9.9, "p80_us": 10.1,
                "repetitions": 20, "error": f"pid={os.getpid()}"}
