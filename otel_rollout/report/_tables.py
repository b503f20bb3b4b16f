"""The report's tables (rich): per env class mean / p90 / max, and the slowest trajectories."""

from __future__ import annotations

from collections.abc import Sequence

from otel_rollout._breakdown import Breakdown
from otel_rollout._summary import SKYRL_KEY_NAMES, group_by, summarize


def table_rows(bds: Sequence[Breakdown]) -> list[tuple[str, int, list[str], str]]:
    rows = []
    for env_class, items in sorted(group_by(bds).items(), key=lambda kv: str(kv[0])):
        s = summarize(items, prefix="")
        cells = []
        for key in SKYRL_KEY_NAMES:
            m, p, x = (s[f"trajectory_time_{key}_{st}"] for st in ("mean", "p90", "max"))
            cells.append(f"{m:.3f} / {p:.3f} / {x:.3f}")
        rows.append((str(env_class), len(items), cells, f"{s['frac_time_in_env']:.3f}"))
    return rows


HEADERS = ["env class", "n", "e2e", "llm", "env", "env_setup", "env_teardown", "other", "frac env"]


def print_table(console, bds: Sequence[Breakdown], title: str) -> None:
    from rich.table import Table

    t = Table(title=f"{title}  (seconds: mean / p90 / max)")
    for h in HEADERS:
        t.add_column(h, justify="right" if h != "env class" else "left")
    for env_class, n, cells, frac in table_rows(bds):
        t.add_row(env_class, str(n), *cells, frac)
    console.print(t)


def slowest(bds: Sequence[Breakdown], k: int = 5) -> list[Breakdown]:
    return sorted(bds, key=lambda b: b.e2e, reverse=True)[:k]


def print_slowest(console, bds: Sequence[Breakdown], k: int = 5) -> None:
    from rich.table import Table

    t = Table(title="slowest trajectories")
    for h in ("trajectory", "env class", "e2e s", "llm", "env", "env_setup", "turns", "trace id"):
        t.add_column(h)
    for b in slowest(bds, k):
        t.add_row(
            b.trajectory_id, str(b.env_class), f"{b.e2e:.3f}", f"{b.llm:.3f}", f"{b.env:.3f}",
            f"{b.env_setup:.3f}", str(b.turns), b.trace_id,
        )  # fmt: skip
    console.print(t)
