"""Make the site ``asv publish`` wrote work without the internet.

asv's ``index.html`` loads jQuery, flot, bootstrap and three small plugins
from public CDNs. Machines of this kind reach package registries but not
those CDNs, so the served site shows "Can not determine continental origin
of swallow" instead of graphs. This script fetches the same files from the
npm registry with ``npm pack`` (cached in ``~/.cache/serbench/asv-static``),
copies them into ``<html_dir>/static/`` and points the page at them::

    asv publish && python scripts/asv_offline_site.py [reports/asv-html]

A CDN address it does not know (a newer asv template) is an error, not a
page that silently breaks.
"""

from __future__ import annotations

import base64
import hashlib
import re
import subprocess
import sys
import tarfile
from pathlib import Path

CACHE = Path.home() / ".cache" / "serbench" / "asv-static"

# CDN address in asv 0.6's index.html -> (npm package@version, file in the package).
# The CDN's minified flot files are the same code as npm's unminified ones;
# stupidtable 1.0.1 is not on npm, 1.1.3 is the same plugin.
ASSETS = {
    "https://code.jquery.com/jquery-3.3.1.min.js": ("jquery@3.3.1", "dist/jquery.min.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.min.js": ("flot@0.8.3", "jquery.flot.js"),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.time.min.js": (
        "flot@0.8.3",
        "jquery.flot.time.js",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.selection.min.js": (
        "flot@0.8.3",
        "jquery.flot.selection.js",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/flot/0.8.3/jquery.flot.categories.min.js": (
        "flot@0.8.3",
        "jquery.flot.categories.js",
    ),
    "https://cdn.jsdelivr.net/npm/flot-orderbars@1.0.0/js/jquery.flot.orderBars.js": (
        "flot-orderbars@1.0.0",
        "js/jquery.flot.orderBars.js",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/stupidtable/1.0.1/stupidtable.min.js": (
        "stupid-table-plugin@1.1.3",
        "stupidtable.min.js",
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/blueimp-md5/2.19.0/js/md5.min.js": (
        "blueimp-md5@2.19.0",
        "js/md5.min.js",
    ),
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/js/bootstrap.min.js": (
        "bootstrap@3.1.1",
        "dist/js/bootstrap.min.js",
    ),
    "https://cdn.jsdelivr.net/npm/bootstrap@3.1.1/dist/css/bootstrap.min.css": (
        "bootstrap@3.1.1",
        "dist/css/bootstrap.min.css",
    ),
}


def package_file(spec: str, member: str) -> bytes:
    """One file of an npm package, from the cached tarball (``npm pack`` fetches it once)."""
    name, version = spec.rsplit("@", 1)
    tarball = CACHE / f"{name}-{version}.tgz"
    if not tarball.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["npm", "pack", "--silent", "--pack-destination", str(CACHE), spec],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    with tarfile.open(tarball) as archive:
        return archive.extractfile(f"package/{member}").read()


def _local_tag(tag: str, html_dir: Path) -> str:
    """``tag`` loading its file from ``static/``; an ``integrity`` hash the npm copy does not match
    (flot: unminified build of the same version) is dropped, a matching one kept."""
    url = re.search(r"""\s(?:src|href)=["'](https?://[^"']+)["']""", tag)
    if url is None:
        return tag
    if url[1] not in ASSETS:
        raise SystemExit(f"unknown CDN file in {html_dir / 'index.html'}: {url[1]}")
    spec, member = ASSETS[url[1]]
    data = package_file(spec, member)
    local = f"static/{spec.replace('@', '-')}-{Path(member).name}"
    (html_dir / local).write_bytes(data)
    tag = tag.replace(url[1], local)
    integrity = re.search(r"""\sintegrity=["'](sha\d+)-([^"']+)["']""", tag)
    if integrity and base64.b64encode(hashlib.new(integrity[1], data).digest()).decode() != integrity[2]:
        tag = tag.replace(integrity[0], "")
    return tag


def make_offline(html_dir: Path) -> None:
    """Copy every CDN file the index page loads into ``static/`` and point the page at the copies."""
    index = html_dir / "index.html"
    (html_dir / "static").mkdir(exist_ok=True)
    page = re.sub(r"<(?:script|link)\b[^>]*>", lambda m: _local_tag(m[0], html_dir), index.read_text())
    index.write_text(page)


if __name__ == "__main__":
    site = Path(sys.argv[1] if len(sys.argv) > 1 else "reports/asv-html")
    make_offline(site)
    print(f"{site}: scripts and stylesheet now served from {site / 'static'}")
