"""Packing kernel arguments for cuLaunchKernel: parameter kinds, their 8-byte slots, and the
per-thread buffer the driver reads them from. Pure Python (ctypes, struct); numpy on first use."""
from __future__ import annotations

import struct

# Kernel parameter kinds: one character each. Every parameter takes an 8-byte slot of the buffer
# (the kernel reads sizeof(T) bytes from the slot's address, so 4-byte values are padded).
SLOTS = {
    "P": "Q",  # pointer (unsigned 64-bit)
    "Q": "Q", "q": "q",
    "I": "I4x", "i": "i4x",
    "H": "H6x", "h": "h6x", "B": "B7x", "b": "b7x",
    "f": "f4x", "d": "d",
}
# each kind's value size in bytes (what the kernel reads from its slot): the slot format's first field
KIND_SIZES = {kind: struct.calcsize("<" + slot[0]) for kind, slot in SLOTS.items()}
NUMPY_KINDS: dict[type, str] = {}  # numpy scalar type -> kind, filled on first use


def numpy_kinds() -> dict[type, str]:
    """numpy scalar type -> parameter kind."""
    if not NUMPY_KINDS:
        import numpy as np

        # numpy.uint64 is how every caller passes a pointer, so it is kind "P": a replay then binds
        # it to the new x / out, or refuses a launch that uses any other pointer (a workspace, the
        # grid-split slots), instead of replaying the recorded address as a constant.
        NUMPY_KINDS.update({
            np.uint64: "P", np.int64: "q", np.uint32: "I", np.int32: "i", np.uint16: "H", np.int16: "h",
            np.uint8: "B", np.int8: "b", np.float32: "f", np.float64: "d",
        })
    return NUMPY_KINDS


class ParamBuffer:
    """One thread's argument storage for one kernel: ``n`` 8-byte value slots, then ``n`` pointers
    to them (the ``void **kernelParams`` of cuLaunchKernel)."""

    __slots__ = ("storage", "values", "params")

    def __init__(self, n: int) -> None:
        import ctypes

        self.storage = (ctypes.c_uint64 * (2 * n))()
        base = ctypes.addressof(self.storage)
        for i in range(n):
            self.storage[n + i] = base + 8 * i
        self.values = memoryview(self.storage).cast("B")[: 8 * n]
        self.params = base + 8 * n if n else 0


def slot_format(kinds: str) -> str:
    """The ``struct`` format packing one argument per kind into 8-byte slots; ValueError for a kind
    not in ``SLOTS``."""
    unknown = set(kinds) - set(SLOTS)
    if unknown:
        raise ValueError(f"unknown parameter kinds {sorted(unknown)} in {kinds!r}")
    return "<" + "".join(SLOTS[k] for k in kinds)
