"""mkdocs hook: the site's home page is README.md, read at build time, its links into
docs/ made relative to the site. docs/index.md is only a placeholder for the nav, so
the README is the one page to edit and the strict build checks its links too."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def index_page(readme: str) -> str:
    """The README with ``](docs/...)`` links as ``](...)``."""
    return re.sub(r"\]\(docs/", "](", readme)


def on_page_read_source(page, config):
    if page.file.src_uri == "index.md":
        return index_page(README.read_text(encoding="utf-8"))
    return None
