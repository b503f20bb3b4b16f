"""Regenerate the settings table of docs/configure.md from the settings table
in ``otel_rollout/_settings/table.py`` (``--check``: exit 1 if a file is out of date)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from otel_rollout._settings.table import replace_table  # noqa: E402

FILES = ("docs/configure.md",)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name in FILES:
        path = ROOT / name
        text = path.read_text()
        new = replace_table(text)
        if new != text:
            stale.append(name)
            if not check:
                path.write_text(new)
    if check and stale:
        print(f"out of date: {', '.join(stale)}; run python scripts/settings_table.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
