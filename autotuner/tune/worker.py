"""Crash isolation: GPU work runs in a child process per device; the sweep (parent) only talks to it.

A kernel that faults (illegal address, launch failure) poisons its CUDA context, and a kernel that
hangs never returns: either way the child is killed and replaced, the item is recorded with status
``fault`` or ``timeout`` and its error text, and the sweep goes on. Rows already committed by the
parent are never at risk, because the child writes nothing.
"""
from __future__ import annotations

import importlib
import logging
import multiprocessing as mp
import signal
import time
from typing import Any, Sequence

from autotuner.tune.measure import WorkItem, failure
from kernels.settings import export, settings

log = logging.getLogger(__name__)

START_TIMEOUT_S = 300.0


def resolve_hook(spec: str):  # noqa: ANN201 - "module:attribute" → the attribute
    """The object a ``module:attribute`` spec names (measurer factories, setup hooks)."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise ValueError(f"{spec!r} is not of the form module:attribute")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot load {spec!r}: {exc}") from None


def visible_device(device_index: int, visible: str | None) -> str:
    """What the child's ``CUDA_VISIBLE_DEVICES`` must be so that its only device is the parent's device
    ``device_index``: indices count within the parent's own ``CUDA_VISIBLE_DEVICES`` when it has one
    (with "2,3" visible, device 1 is physical GPU 3)."""
    entries = [entry.strip() for entry in (visible or "").split(",") if entry.strip()]
    if visible is None or not entries:
        return str(device_index)
    if device_index >= len(entries):
        raise ValueError(f"device {device_index} is not visible (CUDA_VISIBLE_DEVICES={visible!r})")
    return entries[device_index]


def _worker_main(conn, device_index: int | None, method: str, time_cap_s: float, setup: Sequence[str],  # noqa: ANN001
                 measurer_factory: str) -> None:
    # Ctrl-C reaches the whole process group; the parent decides what stops and when. A worker killed by
    # it would have its item in flight recorded as a fault (by a runner thread that saw it die).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if device_index is not None:
        export({"CUDA_VISIBLE_DEVICES": visible_device(device_index, settings.cuda_visible_devices)})
    for hook in setup:  # "module:function", e.g. tests registering a deliberately faulting variant
        resolve_hook(hook)()
    measurer = resolve_hook(measurer_factory)(method, time_cap_s=time_cap_s)
    conn.send({"ready": True})
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        result = measurer.measure(WorkItem(**message))
        conn.send(result)
        if result.get("fatal"):
            return  # the CUDA context is unusable; the parent starts a fresh worker


class WorkerRunner:
    """Measures items in a child process bound to one GPU; replaces the child after a fault or hang."""

    def __init__(self, device_index: int | None = None, method: str = "cold", *, item_timeout_s: float = 120.0,
                 time_cap_s: float = 0.5, setup: Sequence[str] = (),
                 measurer_factory: str = "autotuner.tune.measure:Measurer"):
        self.device_index = device_index
        self.method = method
        self.item_timeout_s = item_timeout_s
        self.time_cap_s = time_cap_s
        self.setup = tuple(setup)
        self.measurer_factory = measurer_factory
        self._context = mp.get_context("spawn")
        self._process = None
        self._conn = None
        self.restarts = 0

    def _start(self) -> None:
        parent, child = self._context.Pipe()
        self._process = self._context.Process(
            target=_worker_main, daemon=True,
            args=(child, self.device_index, self.method, self.time_cap_s, self.setup, self.measurer_factory),
        )
        self._process.start()
        child.close()
        self._conn = parent
        if not parent.poll(START_TIMEOUT_S):
            self._kill()
            raise RuntimeError(f"GPU worker for device {self.device_index} did not start in {START_TIMEOUT_S:.0f} s")
        try:
            parent.recv()
        except EOFError:
            code = self._process.exitcode
            self._kill()
            raise RuntimeError(f"GPU worker for device {self.device_index} exited at start (code {code})") from None

    def _kill(self) -> None:
        if self._process is not None and self._process.is_alive():
            self._process.kill()
        if self._process is not None:
            self._process.join(timeout=10)
        if self._conn is not None:
            self._conn.close()
        self._process = self._conn = None

    def measure(self, item: WorkItem) -> dict[str, Any]:
        if self._process is None or not self._process.is_alive():
            self._start()
        self._conn.send(item.as_dict())
        started = time.monotonic()
        if not self._conn.poll(self.item_timeout_s):
            log.warning("item %s hung past %.0f s; replacing the worker", item, self.item_timeout_s)
            self._replace()
            return failure("timeout", f"no result within {self.item_timeout_s:.0f} s", fatal=True)
        try:
            result = self._conn.recv()
        except (EOFError, ConnectionError):
            self._process.join(timeout=10)  # the exit code is only known once the process is reaped
            code = self._process.exitcode
            self._replace()
            return failure("fault", f"worker process died (exit code {code}) after {time.monotonic() - started:.1f} s",
                           fatal=True)
        if result.get("fatal"):
            self._replace()
        return result

    def _replace(self) -> None:
        self._kill()
        self.restarts += 1

    def close(self) -> None:
        if self._conn is not None and self._process is not None and self._process.is_alive():
            try:
                self._conn.send(None)
                self._process.join(timeout=10)
            except (BrokenPipeError, OSError):
                pass
        self._kill()

    def __enter__(self) -> "WorkerRunner":
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
