"""Write docs/index.md, the docs site's home page, from README.md: the same page, its
links into docs/ made relative to the site (``--check``: exit 1 if it is out of date)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NOTE = "<!-- generated from README.md by scripts/docs_index.py: edit the README -->\n"


def index_page(readme: str) -> str:
    """The README with ``](docs/...)`` links as ``](...)``."""
    return NOTE + re.sub(r"\]\(docs/", "](", readme)


def main(argv: list[str]) -> int:
    page = index_page((ROOT / "README.md").read_text(encoding="utf-8"))
    target = ROOT / "docs" / "index.md"
    if "--check" in argv:
        if target.read_text(encoding="utf-8") != page:
            print("docs/index.md is out of date: run python scripts/docs_index.py")
            return 1
        return 0
    target.write_text(page, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
