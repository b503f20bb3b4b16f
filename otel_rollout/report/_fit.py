"""Tables that fit the terminal: numbers whole, ids shortened in their middle (a rich table
folds or cuts cells at the end, losing an id's index)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from otel_rollout._base.text import mid


def _chrome(table: Any) -> int:
    """Columns a rich table spends on borders, dividers and padding."""
    n = len(table.columns)
    _, right, _, left = table.padding
    pads = n * (left + right) - (0 if table.pad_edge else left + right)
    return pads if not table.box else pads + n - 1 + (2 if table.show_edge else 0)


def fit_ids(
    table: Any, width: int, rows: Sequence[Sequence[str]], ids: Collection[int]
) -> list[list[str]]:
    """``rows`` with the cells of the ``ids`` columns shortened so that ``table`` (its
    columns added, no rows yet) fits ``width``. Sets the id columns not to wrap."""
    natural = [len(str(c.header)) for c in table.columns]
    for row in rows:
        for i, cell in enumerate(row):
            natural[i] = max(natural[i], len(cell))
    room = width - _chrome(table) - sum(w for i, w in enumerate(natural) if i not in ids)
    widths = {i: natural[i] for i in ids}
    floor = {i: len(str(table.columns[i].header)) for i in ids}
    while sum(widths.values()) > room:
        shrinkable = [i for i in widths if widths[i] > floor[i]]
        if not shrinkable:
            break  # even the headers do not fit: the terminal wraps, nothing is cut
        widest = max(reversed(shrinkable), key=lambda i: widths[i])  # ties: the later
        widths[widest] -= 1
    for i in ids:
        table.columns[i].no_wrap = True
        table.columns[i].overflow = "fold"
    return [[mid(c, widths[i]) if i in widths else c for i, c in enumerate(r)] for r in rows]


def table(headers: Sequence[str], right: Collection[int], title: str | None = None,
          pad_edge: bool = False, **kw: Any) -> Any:  # fmt: skip
    """A rich table of the report's look: the ``right`` columns numbers, right-justified;
    no column wraps."""
    from rich import box
    from rich.table import Table

    t = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=pad_edge, **kw)
    for i, h in enumerate(headers):
        t.add_column(h, justify="right" if i in right else "left", no_wrap=True)
    return t


def print_fitted(console: Any, t: Any, rows: Sequence[Sequence[str]],
                 ids: Collection[int] = (0,)) -> None:  # fmt: skip
    """``t`` with ``rows`` (their ``ids`` cells fitted to the console) printed."""
    for row in fit_ids(t, console.width, rows, ids):
        t.add_row(*row)
    console.print(t)
