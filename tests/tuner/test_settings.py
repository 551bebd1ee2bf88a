"""tilewise.settings.get_settings: a bad value in the environment or .env is one ConfigError
naming it, never a traceback."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tilewise.errors import ConfigError
from tilewise.settings import Settings, get_settings


@pytest.fixture(autouse=True)
def fresh_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Settings read afresh (get_settings keeps the process's), with no .env but the test's."""
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("TILEWISE_REPEATS", "4294967296", "TILEWISE_REPEATS='4294967296': Input should be less"),
        ("TILEWISE_WARMUP", str(2**32), "TILEWISE_WARMUP="),
        ("TILEWISE_REPEATS", "0", "TILEWISE_REPEATS='0': Input should be greater"),
        ("TILEWISE_CORS_ORIGINS", "http://a", '"cors_origins".*a list is written as JSON'),
    ],
)
def test_a_bad_variable_is_a_config_error_naming_it(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, message: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message):
        get_settings()


def test_a_dotenv_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    (tmp_path / ".env").write_bytes(b"TILEWISE_REPEATS=3\n\xff\xfe x\n")
    with pytest.raises(ConfigError, match=r"\.env is not UTF-8 text"):
        get_settings()


@pytest.mark.parametrize("below", ["", "sub"])
@pytest.mark.parametrize("name", ["TILEWISE_CACHE_DIR", "TILEWISE_STUDY_JOURNAL_DIR"])
def test_a_directory_setting_that_meets_a_file_is_refused(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, below: str
) -> None:
    (tmp_path / "afile").touch()
    monkeypatch.setenv(name, str(tmp_path / "afile" / below))
    with pytest.raises(ConfigError, match=f"{name}=.*{tmp_path / 'afile'} is not a directory"):
        get_settings()


def test_a_near_miss_variable_is_named_with_the_setting_it_meant(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A misspelt TILEWISE_ name (in the environment or .env) would be ignored without a
    word: the settings say so and suggest the name; the variables read elsewhere pass."""
    for name in list(os.environ):
        if name.upper().startswith("TILEWISE_"):
            monkeypatch.delenv(name)
    (tmp_path / ".env").write_text("TILEWISE_CACHEDIR=/tmp/x\nPATHS=1\n")
    monkeypatch.setenv("TILEWISE_DATABASE_URL", "sqlite:///x.db")
    monkeypatch.setenv("tilewise_repeat", "3")
    monkeypatch.setenv("TILEWISE_SOMETHING_ELSE", "1")
    monkeypatch.setenv("TILEWISE_TWIN_PROFILE", "910b")
    monkeypatch.setenv("TILEWISE_WARMUP", "2")
    with caplog.at_level(logging.WARNING, logger="tilewise.settings"):
        assert get_settings().warmup == 2
    assert caplog.messages == [
        "TILEWISE_CACHEDIR is not a tilewise setting and is ignored "
        "(did you mean TILEWISE_CACHE_DIR?)",
        "TILEWISE_DATABASE_URL is not a tilewise setting and is ignored "
        "(did you mean TILEWISE_DB_URL?)",
        "TILEWISE_SOMETHING_ELSE is not a tilewise setting and is ignored",
        "tilewise_repeat is not a tilewise setting and is ignored (did you mean TILEWISE_REPEATS?)",
    ]


def test_a_sqlite_file_in_the_home_directory_is_expanded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert Settings(db_url="sqlite:///~/t/w.db").db_url == f"sqlite:///{tmp_path}/t/w.db"
    assert Settings(db_url="sqlite:///~/w.db?timeout=5").db_url == (
        f"sqlite:///{tmp_path}/w.db?timeout=5"
    )
    assert Settings(db_url="sqlite:////abs/w.db").db_url == "sqlite:////abs/w.db"
