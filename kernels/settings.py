"""Every environment variable the product reads, read here and nowhere else (a test greps ``autotuner``,
``kernels``, ``db`` and ``service`` for any other reader). The table of them, for users, is in
docs/SERVICE.md ("Configuration"); ``VARIABLES`` below is its source and a test keeps the two equal.

Why this is not a pydantic-settings class: the embedded lookup (``select_kernel``) reads the database
setting on its first call, and import plus that call must stay within 50 ms without pydantic (about
100 ms of imports on the CPU machine), dataclasses or typing. So the product's settings are a plain
object whose attributes read ``os.environ`` when read (a variable set later, or by a test, is seen); the
service validates its own variables with pydantic (``service.config.Settings``) from the raw values
this object gives (``service_values``), so even the service's variables are read here.

Why it lives in ``kernels``: the layers run ``kernels <- autotuner -> db`` and ``service -> autotuner``,
and every one of them reads a variable (``kernels`` its launch switches and build cache, ``db`` where the
database is, ``autotuner`` its test GPU, ``service`` its limits and tokens). The module imports nothing
of the product, so it sits below all of them, in the lowest package, whose ``__init__`` imports nothing
either: ``db`` may import this one module of ``kernels`` and no other (tests/test_layers.py).

One prefix, ``AUTOTUNER_``. Renamed, the old name still read with a warning: ``SOFTMAX_AUTOTUNER_NATIVE``
(now ``AUTOTUNER_NATIVE``), ``SOFTMAX_AUTOTUNER_CACHE`` (``AUTOTUNER_CACHE_DIR``), ``AUTOTUNER_DATABASE_URL``
(``AUTOTUNER_DB``, which the CLI already read: one name for one database). Variables of other tools
that the product honours (``XDG_DATA_HOME``, ``XDG_CACHE_HOME``, ``CXX``, ``TRITON_INTERPRET``,
``CUDA_VISIBLE_DEVICES``) keep their own names and are read here too.
"""
from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing: the lookup's first call reads this module
if TYPE_CHECKING:
    from pathlib import Path
    from typing import Mapping, MutableMapping

PREFIX = "AUTOTUNER_"

# (variable, default as documented, meaning): the product's own variables, in the order of the table.
VARIABLES: tuple[tuple[str, str, str], ...] = (
    ("AUTOTUNER_DB", "`$XDG_DATA_HOME/softmax-autotuner/tuning.sqlite` (`~/.local/share/...`)",
     "tuning database: a path, `sqlite:///PATH` or `postgresql+psycopg://USER:PASS@HOST/DB` (the CLI's "
     "`--db` overrides it)"),
    ("AUTOTUNER_UPLOAD_TOKEN", "unset (and no `_TOKENS`): every upload is refused (401)",
     "service: bearer token `POST /runs` requires, for runs of any GPU model the project knows"),
    ("AUTOTUNER_UPLOAD_TOKENS", "unset",
     "service: tokens scoped to GPU models, `h100:TOKEN1,h200+gh200:TOKEN2`, or per named uploader as JSON "
     "`{\"lab-a\": {\"token\": \"...\", \"gpus\": [\"h100\"]}}`"),
    ("AUTOTUNER_DEFAULT_GPU", "unset: `gpu` is required (422)",
     "service: GPU model `/dispatch` answers for when the request names none (a model the server has a "
     "table for, else it refuses to start)"),
    ("AUTOTUNER_MAX_M", "2147483647 (2³¹−1)", "service: largest M `/dispatch` accepts"),
    ("AUTOTUNER_MAX_N", "2147483647 (2³¹−1)", "service: largest N `/dispatch` accepts"),
    ("AUTOTUNER_RELOAD_INTERVAL_S", "5", "service: at most this often a request checks the database for a newer table"),
    ("AUTOTUNER_SHIPPED_TABLES", "true", "service: serve the package's shipped tables under the database's"),
    ("AUTOTUNER_MAX_UPLOAD_BYTES", "268435456 (256 MiB)", "service: largest `POST /runs` body"),
    ("AUTOTUNER_NATIVE", "1", "`softmax()`'s native launch module: `1` built in the background on first use, "
     "`build` built at first use in the caller, `0` never used"),
    ("AUTOTUNER_CACHE_DIR", "`$XDG_CACHE_HOME/softmax-autotuner` (`~/.cache/...`)",
     "where the native launch module is built and kept"),
    ("AUTOTUNER_CUDA_DIRECT_LAUNCH", "1", "`0`: CUDA kernels launch through CuPy, not the driver call (diagnosis)"),
    ("AUTOTUNER_TRITON_DIRECT_LAUNCH", "1", "`0`: Triton kernels launch through Triton's launcher (diagnosis)"),
    ("AUTOTUNER_FAKE_GPU", "unset", "tests only: `MODEL[:COUNT]` the sweep reports with a test measurer"),
)
# old name -> the variable that replaced it
RENAMED = {"SOFTMAX_AUTOTUNER_NATIVE": "AUTOTUNER_NATIVE", "SOFTMAX_AUTOTUNER_CACHE": "AUTOTUNER_CACHE_DIR",
           "AUTOTUNER_DATABASE_URL": "AUTOTUNER_DB"}
# service.config.Settings' fields, each read from AUTOTUNER_<FIELD> (database_url from AUTOTUNER_DB)
SERVICE_FIELDS = ("database_url", "upload_token", "upload_tokens", "default_gpu", "max_m", "max_n",
                  "reload_interval_s", "shipped_tables", "max_upload_bytes")

_warned: set[str] = set()


class Settings:
    """The product's configuration, read from ``environ`` (default ``os.environ``) when an attribute is
    read. Values are the variables' text, or None where unset or empty; parsing and checking belong to
    the reader that knows what the value means (``db.engine`` a URL, the service its limits)."""

    __slots__ = ("_environ",)

    def __init__(self, environ: Mapping[str, str] | None = None):
        self._environ = os.environ if environ is None else environ

    def get(self, name: str) -> str | None:
        """One of ``VARIABLES`` (or a renamed one's old name, with a warning), None where unset or empty."""
        value = self._environ.get(name)
        if value:
            return value
        for old, new in RENAMED.items():
            if new == name and self._environ.get(old):
                _warn_renamed(old, new)
                return self._environ[old]
        return None

    @property
    def database(self) -> str | None:
        """``AUTOTUNER_DB``: the tuning database chosen by the environment (None: the default file)."""
        return self.get("AUTOTUNER_DB")

    @property
    def data_home(self) -> Path:
        from pathlib import Path

        return Path(self._environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")

    @property
    def cache_dir(self) -> Path:
        """``AUTOTUNER_CACHE_DIR``, else ``softmax-autotuner`` under ``$XDG_CACHE_HOME`` or ``~/.cache``."""
        from pathlib import Path

        chosen = self.get("AUTOTUNER_CACHE_DIR")
        if chosen:
            return Path(chosen).expanduser()
        return Path(self._environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "softmax-autotuner"

    @property
    def native(self) -> str:
        """``AUTOTUNER_NATIVE``: "1" (default), "0" or "build"."""
        return self.get("AUTOTUNER_NATIVE") or "1"

    @property
    def cuda_direct_launch(self) -> bool:
        return self.get("AUTOTUNER_CUDA_DIRECT_LAUNCH") != "0"

    @property
    def triton_direct_launch(self) -> bool:
        return self.get("AUTOTUNER_TRITON_DIRECT_LAUNCH") != "0"

    @property
    def fake_gpu(self) -> str | None:
        return self.get("AUTOTUNER_FAKE_GPU")

    @property
    def triton_interpret(self) -> bool:
        """Triton's own ``TRITON_INTERPRET`` (read by an older Triton that has no ``knobs``)."""
        return self._environ.get("TRITON_INTERPRET", "0") not in ("", "0")

    @property
    def cxx(self) -> str | None:
        """The C++ compiler named by ``CXX``, the build tools' convention."""
        return self._environ.get("CXX") or None

    @property
    def cuda_visible_devices(self) -> str | None:
        return self._environ.get("CUDA_VISIBLE_DEVICES")

    def service_values(self) -> dict[str, str]:
        """The service's variables that are set, by ``service.config.Settings`` field name."""
        values = {field: self.get("AUTOTUNER_DB" if field == "database_url" else PREFIX + field.upper())
                  for field in SERVICE_FIELDS}
        return {field: value for field, value in values.items() if value is not None}


def service_environment(values: Mapping[str, object]) -> dict[str, str]:
    """The variables that make ``Settings().service_values()`` in another process give ``values``
    (field name -> value; None left out): how ``service.main`` hands settings to its worker processes."""
    names = {field: "AUTOTUNER_DB" if field == "database_url" else PREFIX + field.upper() for field in SERVICE_FIELDS}
    return {names[field]: str(value) for field, value in values.items() if value is not None}


def export(variables: Mapping[str, str], environ: MutableMapping[str, str] | None = None) -> None:
    """Set ``variables`` in this process's environment, for the processes it starts (uvicorn's
    workers, a sweep worker's CUDA runtime): the one place the product writes its environment."""
    (os.environ if environ is None else environ).update(variables)


def _warn_renamed(old: str, new: str) -> None:
    if old not in _warned:
        _warned.add(old)
        import warnings

        warnings.warn(f"${old} is renamed ${new}; the old name will stop working in a later release",
                      FutureWarning, stacklevel=4)


settings = Settings()
