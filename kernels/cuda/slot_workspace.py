"""Workspaces of the kernels whose blocks of a row meet in global memory within one launch
(``grid_split.cu``, ``long_split.cu``: epoch-tagged slots, ticket counter), kept per device and stream.

Two streams running such a kernel at once must not share them, and the slots of a row must always
be written by launches of one S (blocks per row), so both are keyed by (device, stream, S).

A new S is met often (long_split's S follows M and N), so its workspace is carved from a zeroed arena
of its device and stream (a view, no allocation or fill of its own: both cost tens of microseconds),
a new arena, twice the last one's size up to ``ARENA_MAX_WORDS``, where the current one is full.
"""
from __future__ import annotations

from typing import Any

ARENA_FIRST_WORDS = 1 << 15  # 256 KiB: the first arena of a device and stream
ARENA_MAX_WORDS = 1 << 21  # 16 MiB: arenas stop doubling here (a larger piece gets an arena of its size)
PIECE_ALIGN_WORDS = 2  # pieces start 16 bytes apart, as whole allocations would


class SlotWorkspace:
    """Mixin for a variant: ``slots`` and ``tickets`` carve from the arena on first use, per (device,
    stream, S). A native launch description holds their addresses, so it is valid on its stream only
    (``Build.stream_bound``); they are never freed."""

    native_stream_bound = True

    def __init__(self) -> None:
        self._slots: dict[tuple[int, int, int], Any] = {}  # (device, stream, S) -> int64 tensor
        self._tickets: dict[tuple[int, int, int], Any] = {}  # (device, stream, S) -> one int32, 0
        self._retired: list[Any] = []  # slot arrays replaced by larger ones, kept alive (see slots)
        self._arenas: dict[tuple[int, int], list] = {}  # (device, stream) -> [zeroed int64 tensor, words used]

    def _carve(self, device_index: int, stream: int, words: int) -> Any:
        """``words`` int64 words, zero and never handed out before, of this device and stream's arena."""
        import torch

        device = torch.device("cuda", device_index)
        if torch.cuda.is_current_stream_capturing():  # its zero fill runs on replay only: no arena for later calls
            return torch.zeros(words, dtype=torch.int64, device=device)
        key = (device_index, stream)
        words = -(-words // PIECE_ALIGN_WORDS) * PIECE_ALIGN_WORDS
        arena = self._arenas.get(key)
        if arena is None or arena[1] + words > arena[0].numel():
            size = ARENA_FIRST_WORDS if arena is None else min(2 * arena[0].numel(), ARENA_MAX_WORDS)
            # the full arena stays alive through the views carved from it
            arena = self._arenas[key] = [torch.zeros(max(size, words), dtype=torch.int64, device=device), 0]
        piece = arena[0][arena[1]:arena[1] + words]
        arena[1] += words
        return piece

    def tickets(self, device_index: int, stream: int, split: int) -> Any:
        """The ticket counter (one int32, 0 between launches) for this device, stream and S."""
        import torch

        key = (device_index, stream, split)
        counter = self._tickets.get(key)
        if counter is None:
            counter = self._tickets[key] = self._carve(device_index, stream, 1).view(torch.int32)[:1]
        return counter

    def slots(self, device_index: int, stream: int, rows: int, split: int) -> Any:
        """The int64 slot array for ``rows`` rows of ``split`` blocks on this device and stream,
        zero when carved (every epoch 0) and grown by doubling. A replaced array is kept
        (``_retired``), never freed: a native launch description made with it (kept by the runtime for
        its shape, or by a native plan) goes on using it, and launches on one array keep its epochs consistent."""
        key = (device_index, stream, split)
        slots = self._slots.get(key)
        if slots is None or slots.numel() < 2 * rows * split:
            size = max(2 * rows * split, 2 * (slots.numel() if slots is not None else 2048))
            if slots is not None:
                self._retired.append(slots)
            slots = self._slots[key] = self._carve(device_index, stream, size)
        return slots
