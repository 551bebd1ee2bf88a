"""The one settings object shared by the CLI, the API and the workers.

Every field can be set from the environment with the ``TILEWISE_`` prefix (``TILEWISE_DB_URL``,
``TILEWISE_MAX_LOOP_SPILLS`` ...) or from a ``.env`` file in the working directory.
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
from collections.abc import Mapping
from functools import lru_cache
from pathlib import Path

from dotenv import dotenv_values
from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from tilewise.errors import ConfigError

_log = logging.getLogger("tilewise.settings")

#: TILEWISE_ variables read outside the settings: the cpu-twin's profile (tilewise.kernels.targets)
#: and the test suite's own.
OTHER_VARIABLES = frozenset(
    {
        "TILEWISE_TWIN_PROFILE",
        "TILEWISE_TEST_PG_URL",
        "TILEWISE_UPDATE_GOLDEN",
        "TILEWISE_RELIABILITY_REPORT",
        "TILEWISE_CHROMIUM",
        "TILEWISE_FAKE_CANN",
    }
)
#: Names people reach for that are far from the setting's own in spelling.
_ALIASES = {"DATABASE_URL": "DB_URL", "DB": "DB_URL", "DATABASE": "DB_URL", "TOKEN": "API_TOKEN"}


def _data_home() -> Path:
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "tilewise"


def _cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "tilewise"


def expand_db_url(url: str) -> str:
    """``url`` with a SQLite file under ``~`` in the home directory, as every other path
    setting (SQLite and Optuna would open a directory named "~")."""
    prefix = "sqlite:///"
    if not url.startswith(prefix + "~"):
        return url
    path, sep, query = url.removeprefix(prefix).partition("?")
    return f"{prefix}{Path(path).expanduser()}{sep}{query}"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TILEWISE_", env_file=".env", extra="ignore")

    db_url: str = Field(
        default_factory=lambda: f"sqlite:///{_data_home() / 'tilewise.db'}",
        description="SQLAlchemy URL of the database holding records, tilings, jobs and studies.",
    )
    cache_dir: Path = Field(
        default_factory=_cache_home, description="Where built kernel variants are kept."
    )

    # Build
    compiler: str = Field(
        default="auto", description="C++ compiler for the cpu-twin: auto, or a path/name."
    )
    build_timeout_s: float = Field(default=180.0, gt=0)
    max_loop_spills: int = Field(
        default=32,
        ge=0,
        description="Register spills inside loops (clang -Rpass-missed=regalloc) above which a "
        "variant is rejected.",
    )
    max_stack_bytes: int = Field(
        default=32 * 1024,
        ge=0,
        description="Largest stack frame of a variant (-fstack-usage); 910B allows 32 KiB/core.",
    )

    # Ascend backend (NPU hosts with CANN)
    ascend_run_mode: str = Field(
        default="npu", pattern="^(npu|cpu|sim)$", description="npu, or CANN's cpu or sim mode."
    )
    ascend_msprof: bool = Field(default=False, description="Time with `msprof op` (Task Duration).")
    ub_check: str = Field(
        default="analytic",
        pattern="^(analytic|compiler)$",
        description="UB constraint for Ascend targets: the op spec's footprint, or the verdict "
        "of bishengir-compile on the kernel's buffer plan (needs the ascend-ir extra).",
    )

    # Run and measure
    runner_threads: int = Field(default=0, ge=0, description="0 = one per host core.")
    run_timeout_s: float = Field(default=60.0, gt=0, description="A launch slower is a hang.")
    # Bounded by what the runner reads them as (32-bit counts); a measurement still stops at
    # max_measure_s, which is how a test makes each one last a second.
    warmup: int = Field(default=1, ge=0, le=2**31 - 1)
    warmup_s: float = Field(
        default=0.1,
        ge=0,
        le=10,
        description="Seconds of discarded launches before each measurement on the twin: a "
        "host core that sat idle while the tuner fitted its surrogates comes back to full speed.",
    )
    repeats: int = Field(default=7, ge=1, le=2**31 - 1)
    max_measure_s: float = Field(default=2.0, gt=0, description="Stop repeating after this.")
    remeasure_top: int = Field(default=3, ge=0, description="Best tilings re-measured at the end.")

    # Bounds on requests
    max_budget: int = Field(default=5000, ge=1)
    max_elements: int = Field(
        default=1 << 28, ge=1, description="Largest tensor (elements) a request may ask for."
    )

    # Service
    api_token: str | None = Field(
        default=None,
        description="Bearer token that write endpoints require. No default: without it writes "
        "are refused, except in dev mode.",
    )
    dev_mode: bool = Field(
        default=False,
        description="Accept writes without a token. Only for a local `tilewise serve` on a "
        "loopback address.",
    )
    max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    max_batch_bytes: int = Field(
        default=1 << 20,
        ge=1024,
        description="Largest body of POST /v1/batches (a manifest of many shapes).",
    )
    max_batch_workloads: int = Field(
        default=2000, ge=1, description="Workloads one batch (a manifest) may hold."
    )
    misses_flush_s: float = Field(
        default=5.0,
        gt=0,
        description="How often the API adds the shapes GET /v1/tilings answered without an "
        "exact entry to the database (counted in memory meanwhile).",
    )
    max_miss_shapes: int = Field(
        default=100_000,
        ge=0,
        description="Shapes the misses table holds at most; asks of further new ones are "
        "dropped (and counted in GET /v1/misses).",
    )
    cors_origins: list[str] = Field(default_factory=list, description="Closed unless listed.")

    # Workers and jobs
    lease_s: float = Field(default=60.0, gt=0, description="A job's lease; renewed by heartbeat.")
    heartbeat_s: float = Field(default=10.0, gt=0)
    poll_s: float = Field(default=1.0, gt=0, description="Idle workers look for jobs this often.")
    default_budget: int = Field(default=40, ge=1)
    max_assistants_per_job: int = Field(
        default=1,
        ge=0,
        description="Idle workers that may assist one running job (tune its study without "
        "holding it); 0 = a job is run by its holder alone.",
    )

    study_journal_dir: Path | None = Field(
        default=None,
        description="A directory of Optuna journal files, one per study, that holds the "
        "tuners' Optuna studies instead of the database (on the fleet benchmark: an eighth of "
        "the database statements and half a worker's CPU per evaluation). Every worker that "
        "shares a study must reach it: one host, or a file system they all mount, such as "
        "NFS. Unset: the studies are in the database.",
    )

    @field_validator("db_url")
    @classmethod
    def _expand_home(cls, value: str) -> str:
        return expand_db_url(value)

    @field_validator("cache_dir", "study_journal_dir")
    @classmethod
    def _expand(cls, value: Path | None) -> Path | None:
        if value is None:
            return None
        value = value.expanduser()
        # A file on the way fails the first build or study, after the database was written:
        # refused here, before anything is.
        for place in (value, *value.parents):
            if place.exists():
                if not place.is_dir():
                    raise ValueError(f"{place} is not a directory")
                break
        return value


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings; a bad value in the environment or ``.env`` is a
    :class:`~tilewise.errors.ConfigError` naming the variable, not a pydantic traceback."""
    names = dict(os.environ)
    with contextlib.suppress(OSError, UnicodeDecodeError):  # a bad .env is named below
        names.update({k: "" for k in dotenv_values(".env")})
    for line in unknown_variables(names):
        _log.warning("%s", line)
    try:
        return Settings()
    except SettingsError as exc:  # a list or mapping variable that is not JSON
        raise ConfigError(
            f"bad setting: {exc}: a list is written as JSON, e.g. "
            "TILEWISE_CORS_ORIGINS='[\"https://a.example\"]'"
        ) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"bad setting: .env is not UTF-8 text ({exc.reason})") from None
    except ValidationError as exc:
        problems = "; ".join(
            f"TILEWISE_{'_'.join(str(part) for part in e['loc']).upper()}={e.get('input')!r}: "
            f"{e['msg']}"
            for e in exc.errors()
        )
        raise ConfigError(f"bad setting: {problems}") from None


def unknown_variables(environ: Mapping[str, str]) -> list[str]:
    """One line per ``TILEWISE_`` name in ``environ`` that no setting reads (names are not
    case-sensitive, as the settings take them), with the setting it likely meant."""
    fields = [name.upper() for name in Settings.model_fields]
    lines = []
    for variable in sorted(environ):
        name = variable.upper()
        if not name.startswith("TILEWISE_") or name in OTHER_VARIABLES:
            continue
        rest = name.removeprefix("TILEWISE_")
        if rest in fields:
            continue
        meant = _ALIASES.get(rest) or next(
            iter(difflib.get_close_matches(rest, fields, n=1, cutoff=0.7)), None
        )
        hint = f" (did you mean TILEWISE_{meant}?)" if meant else ""
        lines.append(f"{variable} is not a tilewise setting and is ignored{hint}")
    return lines
