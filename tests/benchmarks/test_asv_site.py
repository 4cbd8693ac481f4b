"""scripts/asv_offline_site.py: the published asv page loads its scripts from the site, not CDNs.

The npm download is replaced by fixed bytes, so this runs without a network;
what is checked is the page rewrite: addresses, copied files, and which
``integrity`` hashes survive.
"""

from __future__ import annotations

import base64
import hashlib
from pathlib import Path

import by_path
import pytest

JQUERY = "https://code.jquery.com/jquery-3.3.1.min.js"
FLOT = "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js"
CSS = "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css"
HOME_LINK = '<a href="https://github.com/airspeed-velocity/asv/">asv</a>'


def _load_offline_site():
    return by_path.load("scripts/asv_offline_site.py", "offline_site")


def _sri(data: bytes) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(data).digest()).decode()


@pytest.fixture
def offline_site(monkeypatch: pytest.MonkeyPatch):
    module = _load_offline_site()
    monkeypatch.setattr(module, "package_file", lambda spec, member: f"{spec}/{member}".encode())
    return module


def _site(tmp_path: Path, head: str) -> Path:
    (tmp_path / "index.html").write_text(f"<html><head>{head}</head><body>{HOME_LINK}</body></html>")
    return tmp_path


def test_cdn_files_are_copied_and_the_page_points_at_the_copies(offline_site, tmp_path: Path) -> None:
    jquery_bytes = b"jquery@3.3.1/dist/jquery.min.js"
    site = _site(
        tmp_path,
        f'<script src="{JQUERY}" integrity="{_sri(jquery_bytes)}" crossorigin="anonymous"></script>'
        f'<script src="{FLOT}" integrity="{_sri(b"the CDN minified build")}"></script>'
        f'<link rel="stylesheet" href="{CSS}">',
    )

    offline_site.make_offline(site)

    page = (site / "index.html").read_text()
    assert "code.jquery.com" not in page and "cdnjs" not in page and "jsdelivr" not in page
    assert HOME_LINK in page  # a link to visit is not a file to load
    for local, content in [
        ("static/jquery-3.3.1-jquery.min.js", jquery_bytes),
        ("static/flot-0.8.3-jquery.flot.js", b"flot@0.8.3/jquery.flot.js"),
        ("static/bootstrap-3.1.1-bootstrap.min.css", b"bootstrap@3.1.1/dist/css/bootstrap.min.css"),
    ]:
        assert f'"{local}"' in page
        assert (site / local).read_bytes() == content
    # jQuery's hash matches the copy and stays; flot's names other bytes and goes.
    assert _sri(jquery_bytes) in page
    assert page.count("integrity=") == 1


def test_an_unknown_cdn_file_is_an_error(offline_site, tmp_path: Path) -> None:
    site = _site(tmp_path, '<script src="https://cdn.example.org/new-lib.js"></script>')
    with pytest.raises(SystemExit, match=r"cdn\.example\.org/new-lib\.js"):
        offline_site.make_offline(site)
