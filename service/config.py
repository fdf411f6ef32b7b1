"""The service's configuration: one pydantic model of the service's ``AUTOTUNER_*`` variables.

The variables are read, as every variable the product reads, by ``kernels.settings`` (their table is
in docs/SERVICE.md, "Configuration"); this model validates their values. ``Settings()`` takes them
from the environment, ``Settings(max_m=4096, ...)`` overrides some in code. A value that is not
accepted stops the server with a :class:`SettingsError` naming the variable and what is accepted.

2**31 - 1 is the ceiling of the bounds: the database stores M and N as 32-bit integers and
``select_kernel`` takes shapes below 2**31. Every upload token has at least ``MIN_TOKEN_CHARS``
characters and no white space, and no two uploaders share one; a server configured otherwise
refuses to start (an empty ``AUTOTUNER_UPLOAD_TOKEN`` is "unset").
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr, ValidationError, field_validator

from autotuner.domain import MAX_DIM
from autotuner.lookup.gpu import validate_gpu_key
from autotuner.lookup.gpu_models import GPU_MODELS
from db.engine import resolve_database_url
from kernels.settings import settings as environment

MIN_TOKEN_CHARS = 16


class SettingsError(RuntimeError):
    """A configuration the server must not start with; the message names the variable, never a token
    (a pydantic ``ValidationError`` would echo the offending input)."""


@dataclass(frozen=True)
class UploadGrant:
    """Who may upload: an uploader's name, its token, and the GPU models it may upload runs of (None:
    every model the project knows)."""

    name: str
    token: bytes
    gpus: Optional[frozenset[str]]


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    database_url: str = Field(default_factory=resolve_database_url, description="SQLAlchemy URL or a file path")
    upload_token: Optional[SecretStr] = Field(default=None, description="bearer token for POST /runs, any GPU model")
    upload_tokens: Optional[SecretStr] = Field(default=None, description="bearer tokens scoped to GPU models (see above)")
    default_gpu: Optional[str] = Field(default=None, description="GPU model /dispatch uses when the request names none")
    max_m: int = Field(default=MAX_DIM, ge=1, le=MAX_DIM, description="largest M /dispatch accepts")
    max_n: int = Field(default=MAX_DIM, ge=1, le=MAX_DIM, description="largest N /dispatch accepts")
    reload_interval_s: float = Field(default=5.0, ge=0, le=86_400, description="seconds between checks for newer tables")
    shipped_tables: bool = Field(default=True, description="serve the package's shipped tables under the database's")
    max_upload_bytes: int = Field(default=256 * 2**20, ge=1, description="largest POST /runs body in bytes")

    @field_validator("database_url")
    @classmethod
    def _resolved_url(cls, value: str) -> str:
        return resolve_database_url(value)

    @field_validator("default_gpu")
    @classmethod
    def _gpu_key(cls, value: Optional[str]) -> Optional[str]:
        return validate_gpu_key(value) if value else None

    _grants: tuple[UploadGrant, ...] = PrivateAttr(default=())

    def __init__(self, **values: Any) -> None:
        """The environment's values (``kernels.settings``), overridden by ``values``."""
        from_environment = environment.service_values()
        try:
            super().__init__(**{**from_environment, **values})
        except ValidationError as exc:
            raise SettingsError(_described(exc, set(from_environment) - set(values))) from None

    @field_validator("upload_token", "upload_tokens")
    @classmethod
    def _no_empty_token(cls, value: Optional[SecretStr]) -> Optional[SecretStr]:
        # An empty token would let any empty "Bearer " header in; treat it as no token at all.
        return value if value is not None and value.get_secret_value() else None

    def model_post_init(self, _context: Any) -> None:
        try:
            grants = list(parse_upload_tokens(self.upload_tokens.get_secret_value())) if self.upload_tokens else []
            if self.upload_token is not None:
                grants.append(UploadGrant("default", _checked_token(self.upload_token.get_secret_value(),
                                                                    "AUTOTUNER_UPLOAD_TOKEN"), None))
        except ValueError as exc:
            raise SettingsError(str(exc)) from None
        if len({grant.token for grant in grants}) != len(grants):
            raise SettingsError("two uploaders share one upload token; give each its own")
        self._grants = tuple(grants)

    @property
    def upload_grants(self) -> tuple[UploadGrant, ...]:
        """Every configured uploader; empty: uploads are disabled."""
        return self._grants


SECRET_FIELDS = ("upload_token", "upload_tokens")


def variable_of(field: str) -> str:
    return "AUTOTUNER_DB" if field == "database_url" else f"AUTOTUNER_{field.upper()}"


def _described(exc: ValidationError, from_environment: set[str]) -> str:
    """One line per problem naming the variable (or the argument) and what it needs; never a token."""
    problems = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        where = variable_of(field) if field in from_environment else field
        shown = "" if field in SECRET_FIELDS or "input" not in error else f"={error['input']!r}"
        problems.append(f"{where}{shown}: {error['msg'].removeprefix('Value error, ')}")
    return "; ".join(problems)


def parse_upload_tokens(text: str) -> list[UploadGrant]:
    """``AUTOTUNER_UPLOAD_TOKENS``: ``GPU[+GPU...]:TOKEN`` entries separated by commas (the uploader is
    named by its GPUs), or a JSON object ``{"name": {"token": "...", "gpus": ["h100", ...]}}``."""
    where = "AUTOTUNER_UPLOAD_TOKENS"
    if text.lstrip().startswith("{"):
        try:
            entries = [(name, entry["token"], entry["gpus"]) for name, entry in json.loads(text).items()]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{where} is not a JSON object of {{\"name\": {{\"token\": \"...\", \"gpus\": [...]}}}}: "
                             f"{type(exc).__name__} {exc}") from None
        return [UploadGrant(name, _checked_token(token, f"{where} {name!r}"), _gpu_keys(gpus, where))
                for name, token, gpus in entries]
    grants = []
    for number, entry in enumerate(text.split(","), 1):
        gpus, separator, token = entry.strip().partition(":")
        if not separator or not gpus:  # the entry itself is not shown: it may be a token
            raise ValueError(f"{where} entry {number} is not GPU[+GPU...]:TOKEN")
        grants.append(UploadGrant(gpus, _checked_token(token, f"{where} {gpus}"), _gpu_keys(gpus.split("+"), where)))
    return grants


def _gpu_keys(names: Any, where: str) -> frozenset[str]:
    if not isinstance(names, list) and not isinstance(names, tuple) or not names:
        raise ValueError(f"{where}: each uploader names a list of GPU models")
    keys = frozenset(validate_gpu_key(str(name)) for name in names)
    unknown = sorted(keys - set(GPU_MODELS))
    if unknown:
        raise ValueError(f"{where}: unknown GPU model(s) {', '.join(unknown)}; known: {', '.join(sorted(GPU_MODELS))}")
    return keys


def _checked_token(token: Any, where: str) -> bytes:
    """A token long enough to resist guessing and free of white space (a header cannot carry it intact)."""
    if not isinstance(token, str) or len(token) < MIN_TOKEN_CHARS or any(c.isspace() for c in token):
        raise ValueError(f"{where}: an upload token needs at least {MIN_TOKEN_CHARS} characters and no white space "
                         f"(make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))')")
    return token.encode()
