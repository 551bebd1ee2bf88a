"""Fixtures of the API tests: an app on a real database (SQLite and PostgreSQL through
``db_url``) and a client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from tests.api._support import make_settings
from tilewise.api import create_app
from tilewise.settings import Settings
from tilewise.store import Store


@pytest.fixture
def settings(db_url: str) -> Settings:
    return make_settings(db_url)


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(settings)) as test_client:
        yield test_client


@pytest.fixture
def db(client: TestClient) -> Store:
    """The app's own store (opened by its lifespan)."""
    opened: Store = client.app.state.store  # type: ignore[attr-defined]
    return opened


@pytest.fixture(scope="module")
def read_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestClient]:
    """A client for endpoints that never read the database (ops, analysis, targets, OpenAPI):
    one app on SQLite per module, as the database plays no part in what they answer."""
    url = f"sqlite:///{tmp_path_factory.mktemp('api') / 'tilewise.db'}"
    with TestClient(create_app(make_settings(url))) as test_client:
        yield test_client
