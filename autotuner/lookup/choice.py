"""What the embedded lookup answers, ``KernelChoice``, and ``TableReader``, which makes it from one
table's decision index on one GPU (``select.TableStore`` keeps a reader per table, GPU and source)."""
from __future__ import annotations

from collections import namedtuple

from autotuner.lookup.gpu_models import gpu_spec, runnable_candidates
from autotuner.lookup.table import CONVERT_COMMAND

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: a first lookup's import stays light
if TYPE_CHECKING:
    from typing import Any

    from autotuner.lookup.table import DispatchTable

FALLBACK_VARIANT = "torch_softmax"


class KernelChoice(namedtuple("KernelChoice", "variant config_items predicted_us gpu dtype source exact reason",
                              defaults=(False, ""))):
    """What to run for one shape: an immutable record (a named tuple: light to import and to make).

    - ``variant``, ``config_items`` (``((name, value), ...)``; ``config`` is a fresh plain dict on every access);
    - ``predicted_us``: the table's predicted time, or None;
    - ``gpu``, ``dtype``: the canonical names answered for;
    - ``source``: "table" | "model" | "predicted" | "predicted/model" | "nearest-gpu:<key>" | ".../model" | "fallback";
    - ``exact``: the shape itself was measured;
    - ``reason``: for "fallback", "nearest-gpu:*" and a twin model's prediction: why, in words.
    ``choice._replace(field=value)`` gives a changed copy.
    """

    __slots__ = ()

    @property
    def config(self) -> dict[str, Any]:
        return dict(self.config_items)

    @property
    def config_key(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.config_items)

    def as_dict(self) -> dict[str, Any]:
        return {
            "variant": self.variant, "config": self.config, "config_key": self.config_key,
            "predicted_us": self.predicted_us, "gpu": self.gpu, "dtype": self.dtype,
            "source": self.source, "exact": self.exact, "reason": self.reason,
        }


_new_tuple = tuple.__new__


class TableReader:
    """One table's answers on one GPU: the view of the index that answers among the kernels the GPU
    runs and, per index answer, the ``KernelChoice`` fields that do not depend on the shape, made
    once; a new shape then costs the index's probe (``DispatchTable.locate``) and one tuple."""

    __slots__ = ("table", "gpu", "dtype", "view", "runnable", "fields")

    def __init__(self, table: DispatchTable, gpu_key: str, source: str):
        self.table, self.gpu, self.dtype = table, gpu_key, table.dtype
        spec = gpu_spec(gpu_key)
        # a GPU not listed in gpu_models runs what its own table holds (it was measured there)
        runnable = runnable_candidates(table.candidates, table.gpu, spec) if spec else None
        number = 0 if runnable is None or len(runnable) == len(table.candidates) else table.view_of(runnable)
        self.view = 0 if number is None else number
        # None where the index has a view of exactly these kernels; else they, to screen view 0's picks
        self.runnable = runnable if number is None else None
        model_source = "model" if source == "table" else f"{source}/model"  # "predicted/model" too
        # per answer: (variant, config_items, source), or None where it answers the fallback
        self.fields = [None if candidate is None or (self.runnable is not None and candidate not in self.runnable)
                       else (*table.choice_fields[candidate], model_source if rule == "model" else source)
                       for candidate, rule, _ in table.answers]

    def choice(self, m: int, n: int) -> KernelChoice:
        """The answer for (m, n), m >= 1 (``KernelChoice(...)`` made without the keyword handling of
        the generated ``__new__``: tests/autotuner/test_select.py checks that the two agree)."""
        answer, predicted_us, exact = self.table.locate(m, n, self.view)
        fields = self.fields[answer]
        if fields is None:
            return self._fallback(m, n, answer, predicted_us)
        return _new_tuple(KernelChoice, (fields[0], fields[1], predicted_us, self.gpu, self.dtype, fields[2], exact, ""))

    def _fallback(self, m: int, n: int, answer: int, predicted_us: float | None) -> KernelChoice:
        table = self.table
        candidate, _, reason = table.answers[answer]
        if candidate is None:  # the index's fallback: its reason, for this shape
            reason = reason.format(m=m, n=n) if reason else ""
        else:  # view 0's pick, which this GPU does not run
            predicted_us = None
            reason = (f"the {table.gpu} {table.dtype}/{table.timing_method} table's index holds no answers among "
                      f"the kernels {self.gpu!r} runs, and its pick for ({m}, {n}) is not one of them: "
                      f"`{CONVERT_COMMAND}` rebuilds the index with a view for it")
        return KernelChoice(FALLBACK_VARIANT, (), predicted_us, self.gpu, table.dtype, "fallback", False, reason)
