"""The API's documentation pages work on a host without internet: /docs and /redoc load their
scripts and styles from the service itself."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest
from fastapi.testclient import TestClient


class _References(HTMLParser):
    """Every URL a page makes the browser fetch: src and href attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "spec-url") and value:
                self.urls.append(value)


def _references(html: str) -> list[str]:
    parser = _References()
    parser.feed(html)
    return parser.urls


@pytest.mark.parametrize(
    ("page", "assets"),
    [
        ("/docs", {"swagger-ui-bundle.js": "javascript", "swagger-ui.css": "css"}),
        ("/redoc", {"redoc.standalone.js": "javascript"}),
    ],
)
def test_docs_pages_load_only_local_assets(
    read_client: TestClient, page: str, assets: dict[str, str]
) -> None:
    r = read_client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    # No absolute URL anywhere in the page (scripts, styles, fonts, icons): a CDN or Google
    # Fonts link is what left the page blank offline.
    assert re.findall(r"(?:https?:)?//[\w.-]+\.\w+/", r.text) == []
    urls = _references(r.text)
    assert urls and all(u.startswith("/") and not u.startswith("//") for u in urls), urls
    served = {u.rsplit("/", 1)[-1]: u for u in urls}
    for name, kind in assets.items():
        asset = read_client.get(served[name])
        assert asset.status_code == 200, served[name]
        assert kind in asset.headers["content-type"], asset.headers["content-type"]
        assert len(asset.content) > 10_000  # the real bundle, not a stub
    assert "/openapi.json" in r.text
    assert read_client.get("/openapi.json").status_code == 200


def test_docs_pages_are_not_in_the_schema(read_client: TestClient) -> None:
    paths = read_client.get("/openapi.json").json()["paths"]
    assert not {"/docs", "/redoc", "/docs/oauth2-redirect"} & set(paths)
