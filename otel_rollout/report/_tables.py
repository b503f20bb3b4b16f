"""The report's tables (rich): per env class mean / p90 / max, and the slowest trajectories."""

from __future__ import annotations

from otel_rollout._summary import SKYRL_KEY_NAMES, summarize_columns
from otel_rollout.report._aggregate import ReportData
from otel_rollout.report._model import ReadResult


def table_rows(data: ReportData) -> list[tuple[str, int, list[str], str]]:
    """Per env class: name, count, ``mean / p90 / max`` cells per SkyRL key, frac env."""
    rows = []
    for env_class, n, columns in data.groups():
        s = summarize_columns(columns, prefix="")
        cells = []
        for key in SKYRL_KEY_NAMES:
            m, p, x = (s[f"trajectory_time_{key}_{st}"] for st in ("mean", "p90", "max"))
            cells.append(f"{m:.3f} / {p:.3f} / {x:.3f}")
        rows.append((env_class, n, cells, f"{s['frac_time_in_env']:.3f}"))
    return rows


HEADERS = ["env class", "n", "e2e", "llm", "env", "env_setup", "env_teardown", "other", "frac env"]


def print_table(console, data: ReportData, title: str) -> None:
    from rich.table import Table

    t = Table(title=f"{title}  (seconds: mean / p90 / max)")
    for h in HEADERS:
        t.add_column(h, justify="right" if h != "env class" else "left")
    for env_class, n, cells, frac in table_rows(data):
        t.add_row(env_class, str(n), *cells, frac)
    console.print(t)


def print_slowest(console, data: ReportData) -> None:
    from rich.table import Table

    t = Table(title="slowest trajectories")
    for h in ("trajectory", "env class", "e2e s", "llm", "env", "env_setup", "turns", "trace id"):
        t.add_column(h)
    for b in (t.breakdown for t in data.slowest()):
        t.add_row(
            b.trajectory_id, str(b.env_class), f"{b.e2e:.3f}", f"{b.llm:.3f}", f"{b.env:.3f}",
            f"{b.env_setup:.3f}", str(b.turns), b.trace_id,
        )  # fmt: skip
    console.print(t)


def print_losses(console, result: ReadResult) -> None:
    """What was read but not counted, per reason, and the incomplete trace ids."""
    for reason, n in sorted(result.losses.items()):
        console.print(f"[yellow]{n} {reason}[/yellow]")
    if result.incomplete:
        console.print(f"incomplete trace ids: {' '.join(result.incomplete)}")
