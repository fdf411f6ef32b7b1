"""Diagnostic (GPU): host time of ``softmax`` on the rows a sampling step meets, ``logits[:, -1, :]``
over GPT-2's vocabulary of 50257 (fp16): of one sequence, a row whose data pointer is not 16-byte
aligned for 7 of every 8 lengths; of 4 sequences, rows that are not contiguous (50257 x length
elements apart, which the native dispatch copies first, as ``torch.softmax`` does). Per call with the
device drained before it, alternating with ``torch.softmax`` on the same rows, median of 400 calls,
after ``autotuner.warmup``.

    python -m bench.probes.misaligned_rows
"""
from __future__ import annotations

import json
import statistics
import time


def main() -> None:
    import torch

    import autotuner
    from autotuner import softmax

    autotuner.warmup(dtypes=("fp16",))
    result = {}
    for batch, length in ((1, 2), (1, 5), (1, 9), (4, 2), (4, 5), (4, 9)):
        rows = torch.randn(batch, length, 50257, device="cuda", dtype=torch.float16)[:, -1, :]
        times: dict[str, list[float]] = {"softmax": [], "torch": []}
        for _ in range(400):
            for name, run in (("softmax", softmax), ("torch", lambda r: torch.softmax(r, -1))):
                torch.cuda.synchronize()
                started = time.perf_counter_ns()
                run(rows)
                times[name].append((time.perf_counter_ns() - started) / 1e3)
        ours, torchs = statistics.median(times["softmax"]), statistics.median(times["torch"])
        result[f"{batch}x{length}"] = {"aligned": rows.data_ptr() % 16 == 0, "contiguous": rows.is_contiguous(),
                                       "softmax_us": round(ours, 2), "torch_us": round(torchs, 2),
                                       "ratio": round(ours / torchs, 3)}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
