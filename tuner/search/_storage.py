"""Where the tuners' Optuna studies live: in the database (Optuna's RDB storage, the default)
or in a directory of Optuna journal files (``Settings.study_journal_dir``).

A journal is an append-only log of a study's operations that each process replays when it
opens the study; Optuna locks the file for each write with a symlink, which also works on NFS,
and breaks a lock left by a killed process after 30 s.
One file per study keeps the replay to that study's own history: a single file for every
study would be replayed whole by every tune. On the fleet benchmark, with journal files an
evaluation cost the database an eighth of the statements and a worker half the CPU (README,
"A fleet of workers on one PostgreSQL").
"""

from __future__ import annotations

import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.storages.journal import JournalFileBackend, JournalStorage

from tilewise import store
from tilewise.errors import StoreError

#: The suffix of a study's journal file in ``Settings.study_journal_dir``.
JOURNAL_SUFFIX = ".journal"


class _Journal(JournalFileBackend):
    """Optuna's journal file, whose I/O errors (a full disk, an NFS mount gone away) are
    :class:`StoreError` naming the file: a worker then hands its job back and resumes it
    later, as when it loses the database, instead of failing it for good."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            super().__init__(str(path))
        except OSError as exc:
            raise self._error(exc) from exc

    def _error(self, exc: OSError) -> StoreError:
        return StoreError(f"cannot reach the Optuna study journal {self.path}: {exc}")

    def read_logs(self, log_number_from: int) -> Generator[dict[str, Any], None, None]:
        try:
            yield from super().read_logs(log_number_from)
        except OSError as exc:
            raise self._error(exc) from exc

    def append_logs(self, logs: list[dict[str, Any]]) -> None:
        try:
            super().append_logs(logs)
        except OSError as exc:
            raise self._error(exc) from exc


def journal_path(directory: Path, study_name: str) -> Path:
    """The journal file of the study ``study_name`` in ``directory``."""
    return directory / f"{study_name}{JOURNAL_SUFFIX}"


def open_storage(
    url: str, study_name: str, journal_dir: Path | None = None
) -> optuna.storages.BaseStorage:
    """The storage of the study ``study_name``: its journal file in ``journal_dir`` (created on
    first use, with the directory), else Optuna's RDB storage on the database at ``url``.

    Raises:
        StoreError: the journal directory cannot be created or its file opened (and later,
            from the storage's calls, when the file cannot be read or written).
        sqlalchemy.exc.SQLAlchemyError: the database cannot be reached.
    """
    if journal_dir is not None:
        return JournalStorage(_Journal(journal_path(journal_dir, study_name)))
    # Workers starting together on a new database race to create Optuna's tables: the loser's
    # CREATE fails, and a second try finds the tables there.
    attempts = 5
    for attempt in range(attempts):
        try:
            return optuna.storages.RDBStorage(url, engine_kwargs=store.optuna_engine_kwargs(url))
        except sqlalchemy.exc.SQLAlchemyError:
            if attempt == attempts - 1:
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")  # pragma: no cover


def close_storage(storage: optuna.storages.BaseStorage) -> None:
    """Release what ``storage`` holds: an RDB storage's connections (a journal holds none
    between writes)."""
    if isinstance(storage, optuna.storages.RDBStorage):
        storage.engine.dispose()
