"""The service's configuration: one pydantic-settings class read from ``AUTOTUNER_*`` variables.

=============================  ==========================================================  ==========
variable                       meaning                                                     default
=============================  ==========================================================  ==========
``AUTOTUNER_DATABASE_URL``     tuning database (SQLAlchemy URL or a path)                  as the CLI:
                                                                                           ``$AUTOTUNER_DB``, else the
                                                                                           default SQLite file
``AUTOTUNER_UPLOAD_TOKEN``     bearer token that ``POST /runs`` requires; unset: every      unset
                               upload is refused with 401
``AUTOTUNER_DEFAULT_GPU``      GPU model ``/dispatch`` answers for when ``gpu`` is omitted  unset (gpu required)
``AUTOTUNER_MAX_M``            largest M ``/dispatch`` accepts                              2**31 - 1
``AUTOTUNER_MAX_N``            largest N ``/dispatch`` accepts                              2**31 - 1
``AUTOTUNER_RELOAD_INTERVAL_S``  at most this often a request checks the database for a    5.0
                               newer fitted table
``AUTOTUNER_SHIPPED_TABLES``   serve the package's shipped tables under the database's     true
``AUTOTUNER_MAX_UPLOAD_BYTES``  largest ``POST /runs`` body                                256 MiB
=============================  ==========================================================  ==========

2**31 - 1 is the ceiling of the bounds: the database stores M and N as 32-bit integers and
``select_kernel`` takes shapes below 2**31.
"""
from __future__ import annotations

from typing import Optional

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from autotuner.domain import MAX_DIM
from autotuner.lookup.gpu import validate_gpu_key
from db.engine import resolve_database_url


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="AUTOTUNER_", extra="ignore", frozen=True)

    database_url: str = Field(default_factory=resolve_database_url, description="SQLAlchemy URL or a file path")
    upload_token: Optional[SecretStr] = Field(default=None, description="bearer token for POST /runs; unset refuses uploads")
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

    @field_validator("upload_token")
    @classmethod
    def _no_empty_token(cls, value: Optional[SecretStr]) -> Optional[SecretStr]:
        # An empty token would let any empty "Bearer " header in; treat it as no token at all.
        return value if value is not None and value.get_secret_value() else None
