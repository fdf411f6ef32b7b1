"""Workspaces of the kernels whose blocks of a row meet in global memory within one launch
(``grid_split.cu``, ``long_split.cu``: epoch-tagged slots, ticket counter), kept per device and stream.

Two streams running such a kernel at once must not share them, and the slots of a row must always
be written by launches of one S (blocks per row), so both are keyed by (device, stream, S).
"""
from __future__ import annotations

from typing import Any



class SlotWorkspace:
    """Mixin for a variant: ``slots`` and ``tickets`` allocate on first use, per (device, stream, S).
    A native launch description holds their addresses, so it is valid on its stream only
    (``Build.stream_bound``); they are never freed."""

    native_stream_bound = True

    def __init__(self) -> None:
        self._slots: dict[tuple[int, int, int], Any] = {}  # (device, stream, S) -> int64 tensor
        self._tickets: dict[tuple[int, int, int], Any] = {}  # (device, stream, S) -> one int32, 0
        self._retired: list[Any] = []  # slot arrays replaced by larger ones, kept alive (see slots)

    def tickets(self, device_index: int, stream: int, split: int) -> Any:
        """The ticket counter (one int32, 0 between launches) for this device, stream and S."""
        import torch

        key = (device_index, stream, split)
        counter = self._tickets.get(key)
        if counter is None:
            counter = self._tickets[key] = torch.zeros(1, dtype=torch.int32, device=torch.device("cuda", device_index))
        return counter

    def slots(self, device_index: int, stream: int, rows: int, split: int) -> Any:
        """The int64 slot array for ``rows`` rows of ``split`` blocks on this device and stream,
        zero-filled when allocated (every epoch 0) and grown by doubling. A replaced array is kept
        (``_retired``), never freed: a native launch description made with it (kept by the runtime for
        its shape) goes on using it, and launches on one array keep its epochs consistent."""
        import torch

        key = (device_index, stream, split)
        slots = self._slots.get(key)
        if slots is None or slots.numel() < 2 * rows * split:
            size = max(2 * rows * split, 2 * (slots.numel() if slots is not None else 2048))
            if slots is not None:
                self._retired.append(slots)
            slots = self._slots[key] = torch.zeros(size, dtype=torch.int64, device=torch.device("cuda", device_index))
        return slots
