"""Replaying recorded CUDA launches: the record of one cuLaunchKernel call (``CudaLaunch``), the
stream-owned buffers a replay may keep, and the code a runtime plan runs to issue a recorded launch
again with new input and output pointers (``kernels.replay_plan`` builds plans from it).

Every ``numpy.uint64`` argument counts as a pointer: a replay binds it to x or out, keeps a null, or
keeps a buffer registered as the recorded stream's under a guard that the current stream is that one;
any other pointer refuses the replay.
"""
from __future__ import annotations

from typing import Any

from kernels.cuda.packing import ParamBuffer


# Buffers a variant keeps for one stream and never frees (cuda_grid_split's slots and ticket
# counter): pointer -> raw stream handle. A replay may pass such a pointer as recorded while the
# current stream is that stream (the launch would pass the same one); any other pointer besides x
# and out makes a launch unsafe to replay.
_stream_buffers: dict[int, int] = {}


def register_stream_buffer(pointer: int, stream: int) -> None:
    """Declare ``pointer`` a buffer owned by ``stream`` for as long as the process runs: launches
    on that stream always pass it, so a replay guarded on the stream may keep it."""
    _stream_buffers[int(pointer)] = int(stream)


class CudaLaunch:
    """One cuLaunchKernel call as a ``KernelLauncher`` issued it: the launcher, the device and its
    CUfunction, grid, dynamic shared memory, stream and the arguments (plain values by kind)."""

    def __init__(self, launcher: Any, device: int, handle: int, grid: tuple, shared_mem: int,
                 stream: int, args: tuple, launch_kernel: Any) -> None:
        self.launcher, self.device, self.handle = launcher, device, handle
        self.launch_kernel = launch_kernel  # the driver's cuLaunchKernel the launcher used
        self.grid, self.shared_mem, self.stream = grid, shared_mem, stream
        self.args = tuple(int(a) if k in "PQqIiHhBb" else float(a) for k, a in zip(launcher.kinds, args))
        self._prepacked: ParamBuffer | None = None

    def pointers(self) -> list[int]:
        """The pointer arguments, in order."""
        return [a for k, a in zip(self.launcher.kinds, self.args) if k == "P"]

    def same_launch(self, other: Any) -> bool:
        return isinstance(other, CudaLaunch) and (
            self.launcher, self.device, self.handle, self.grid, self.shared_mem, self.args) == (
            other.launcher, other.device, other.handle, other.grid, other.shared_mem, other.args)

    def replay(self) -> None:
        """Issue the recorded driver call again, as is: arguments packed once, the recorded stream.
        The cheapest launch of this kernel there is (the benchmark's raw-launch floor)."""
        if self._prepacked is None:
            self._prepacked = ParamBuffer(len(self.args))
            self.launcher._pack(self._prepacked.values, 0, *self.args)
        bx, by, bz = self.launcher.block
        self.launch_kernel(self.handle, *self.grid, bx, by, bz, self.shared_mem, self.stream, self._prepacked.params, 0)

    def bind_code(self, x_ptr: int, out_ptr: int, tag: str) -> tuple[str | None, list[str], dict[str, Any]] | None:
        """This launch as code for a generated replay: (guard, statements, names). The statements
        pack the arguments, ``xp`` for pointer ``x_ptr`` and ``op`` for ``out_ptr``, into the calling
        thread's buffer and launch on ``stream``. Names carry ``tag`` so several launches share one
        function. A pointer registered as the recorded stream's buffer (``register_stream_buffer``)
        stays as recorded, under the guard that the current stream is that one (no guard
        otherwise). None where the launch uses any other pointer (a workspace: its address may
        change, so replaying it is not safe)."""
        args, names = [], {}
        guard = None
        for index, (kind, value) in enumerate(zip(self.launcher.kinds, self.args)):
            if kind == "P" and value == x_ptr:
                args.append("xp")
            elif kind == "P" and value == out_ptr:
                args.append("op")
            elif kind == "P" and value == 0:  # a null pointer (an optional buffer not used)
                args.append("0")
            elif kind == "P" and _stream_buffers.get(value) == self.stream:
                args.append(f"c{index}{tag}")
                names[f"c{index}{tag}"] = value
                guard = f"raw_stream(DEVICE) == {self.stream}"
            elif kind == "P":
                return None
            else:
                args.append(f"c{index}{tag}")
                names[f"c{index}{tag}"] = value
        bx, by, bz = self.launcher.block
        gx, gy, gz = self.grid
        names.update({f"local{tag}": self.launcher._local, f"launcher{tag}": self.launcher,
                      f"pack{tag}": self.launcher._pack, f"launch_kernel{tag}": self.launch_kernel})
        statements = [
            "try:",
            f"    buffer{tag} = local{tag}.buffer",
            "except AttributeError:",
            f"    buffer{tag} = launcher{tag}.buffer()",
            f"pack{tag}(buffer{tag}.values, 0, {', '.join(args)})",
            f"launch_kernel{tag}({self.handle}, {gx}, {gy}, {gz}, {bx}, {by}, {bz}, {self.shared_mem}, stream, "
            f"buffer{tag}.params, 0)",
        ]
        return guard, statements, names

    def native_launch(self, x_ptr: int, out_ptr: int) -> Any:
        """This launch for the native module (``kernels.native.NativeLaunch``), ``x_ptr`` and
        ``out_ptr`` patched per call; None where it takes any other pointer but null (a workspace or
        a stream's buffer: the native path keeps no guard)."""
        from kernels.native import NativeLaunch

        values, x_slots, out_slots = [], [], []
        for index, (kind, value) in enumerate(zip(self.launcher.kinds, self.args)):
            if kind == "P" and value and value in (x_ptr, out_ptr):
                (x_slots if value == x_ptr else out_slots).append(index)
                value = 0
            elif kind == "P" and value:
                return None
            values.append(value)
        return NativeLaunch(self.handle, self.grid, self.launcher.block, self.shared_mem, self.launcher.kinds, values,
                            x_slots, out_slots)

    def bind(self, x_ptr: int, out_ptr: int) -> Any:
        """``fn(xp, op, stream)``: this launch with new pointers on ``stream``; None as for
        ``bind_code``, and for a launch that keeps a stream's buffer (it is only valid on that
        stream, which ``fn`` could not check)."""
        code = self.bind_code(x_ptr, out_ptr, "")
        if code is None or code[0] is not None:
            return None
        _, statements, names = code
        source = "\n".join(["def bound(xp, op, stream):", *(f"    {line}" for line in statements)])
        exec(compile(source, f"<cuda replay {self.handle:#x}>", "exec"), names)  # noqa: S102
        return names["bound"]
