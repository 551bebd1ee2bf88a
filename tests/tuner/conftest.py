"""Fixtures the worker, assist and CLI tests share: one cpu-twin build cache for the session
(each variant compiles once, 1-2 s), and a worker's settings and store on ``db_url``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tilewise import store
from tilewise.settings import Settings


@pytest.fixture(scope="session")
def twin_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "twin-build-cache"


@pytest.fixture
def settings(db_url: str, twin_cache: Path) -> Settings:
    """Short leases, heartbeats and polls, so that worker tests take seconds."""
    return Settings(
        db_url=db_url,
        cache_dir=twin_cache,
        repeats=3,
        remeasure_top=2,
        lease_s=30.0,
        heartbeat_s=0.2,
        poll_s=0.1,
    )


@pytest.fixture
def db(settings: Settings) -> Iterator[store.Store]:
    opened = store.open_store(settings.db_url)
    yield opened
    opened.close()
