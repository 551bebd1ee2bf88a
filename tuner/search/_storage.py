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
from pathlib import Path

import optuna
import sqlalchemy.exc
from optuna.storages.journal import JournalFileBackend, JournalStorage

from tilewise import store
from tilewise.errors import StoreError

#: The suffix of a study's journal file in ``Settings.study_journal_dir``.
JOURNAL_SUFFIX = ".journal"


def journal_path(directory: Path, study_name: str) -> Path:
    """The journal file of the study ``study_name`` in ``directory``."""
    return directory / f"{study_name}{JOURNAL_SUFFIX}"


def open_storage(
    url: str, study_name: str, journal_dir: Path | None = None
) -> optuna.storages.BaseStorage:
    """The storage of the study ``study_name``: its journal file in ``journal_dir`` (created on
    first use, with the directory), else Optuna's RDB storage on the database at ``url``.

    Raises:
        StoreError: the journal directory cannot be created or its file opened.
        sqlalchemy.exc.SQLAlchemyError: the database cannot be reached.
    """
    if journal_dir is not None:
        path = journal_path(journal_dir, study_name)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            return JournalStorage(JournalFileBackend(str(path)))
        except OSError as exc:
            raise StoreError(f"cannot open the Optuna study journal {path}: {exc}") from exc
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
