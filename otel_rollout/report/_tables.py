"""The report's tables (rich), each fitting an 80-column terminal."""

from __future__ import annotations

from typing import Any

import numpy as np

from otel_rollout._accounting.summary import key_names, summarize_columns
from otel_rollout._base.text import mid
from otel_rollout.report._aggregate import ReportData
from otel_rollout.report._fit import print_fitted, table
from otel_rollout.report._model import LOSS_INCOMPLETE, ReadResult

#: An env class (or run id) in the per-group tables, shortened in its middle beyond this.
GROUP_WIDTH = 20
#: Rows of a table, and trace ids listed, before "and N more (see --format json)".
ROWS_SHOWN = IDS_SHOWN = 10
_STATS = ("mean", "p90", "max")


def _stats(s: dict[str, float], key: str) -> list[float]:
    return [s[f"trajectory_time_{key}_{st}"] for st in _STATS]


def table_rows(data: ReportData) -> list[tuple[str, int, list[str], str]]:
    """Per group: name, count, ``mean / p90 / max`` cells per SkyRL key, frac env."""
    rows = []
    for name, n, columns in data.groups():
        s = summarize_columns(columns, prefix="", bands=data.bands)
        cells = [" / ".join(f"{v:.3f}" for v in _stats(s, key)) for key, _ in key_names(data.bands)]
        rows.append((name, n, cells, f"{s['frac_time_in_env']:.3f}"))
    return rows


def headers(data: ReportData) -> list[str]:
    """The headers of :func:`table_rows`: the group, n, each figure, frac env."""
    return [data.group_label, "n", *(name for _, name in key_names(data.bands)), "frac env"]


def print_compact(console: Any, data: ReportData, title: str) -> None:
    """A row per group: n, mean and p90 of e2e, each band's share of the mean e2e."""
    t = table([data.group_label, "n", "mean", "p90", *(b.label for b in data.bands)],
              right=range(1, 4 + len(data.bands)),
              title=f"{title}  (e2e in seconds; bands as share of e2e)")  # fmt: skip
    groups = data.groups()
    rows = []
    for name, n, columns in groups[:ROWS_SHOWN]:
        s = summarize_columns(columns, prefix="", bands=data.bands)
        e2e = s["trajectory_time_completion_mean"]
        shares = [f"{100 * float(columns[band].mean()) / e2e:.0f}%" if e2e > 0 else "-"
                  for band in data.bands.names]  # fmt: skip
        rows.append([name, str(n), f"{e2e:.3f}", f"{s['trajectory_time_completion_p90']:.3f}",
                     *shares])  # fmt: skip
    print_fitted(console, t, rows)
    if len(groups) > ROWS_SHOWN:
        console.print(f"and {len(groups) - ROWS_SHOWN} more (see --format json)")


def print_table(console: Any, data: ReportData, title: str) -> None:
    """Per group, a row per band: mean / p90 / max seconds and its share of the mean e2e."""
    t = table([data.group_label, "n", "band", *_STATS, "share"], right=(1, 3, 4, 5, 6),
              title=f"{title}  (seconds)", pad_edge=True)  # fmt: skip
    for name, n, columns in data.groups():
        s = summarize_columns(columns, prefix="", bands=data.bands)
        e2e_mean = s["trajectory_time_completion_mean"]
        for i, (key, band) in enumerate(key_names(data.bands)):
            m, p, x = _stats(s, key)
            share = "" if i == 0 else (f"{100 * m / e2e_mean:.0f}%" if e2e_mean > 0 else "-")
            t.add_row(mid(name, GROUP_WIDTH) if i == 0 else "", str(n) if i == 0 else "", band,
                      f"{m:.3f}", f"{p:.3f}", f"{x:.3f}", share)  # fmt: skip
        t.add_row("", "", "frac env", f"{s['frac_time_in_env']:.3f}", "", "", "",
                  end_section=True)  # fmt: skip
    console.print(t)


def print_slowest(console: Any, data: ReportData) -> None:
    """The slowest trajectories: id, env class, e2e, the band they spent most in, trace id."""
    t = table(["trajectory", "env class", "e2e", "most in", "trace id"], right=(2,),
              title="slowest trajectories (seconds)")  # fmt: skip
    rows = []
    for b in (tr.breakdown for tr in data.slowest()):
        top = max(b.bands.names, key=b.band)
        share = f"{top} {100 * b.band(top) / b.e2e:.0f}%" if b.e2e > 0 else "-"
        rows.append([b.trajectory_id, str(b.env_class), f"{b.e2e:.3f}", share, b.trace_id])
    print_fitted(console, t, rows, ids=(0, 1))


def print_losses(console: Any, result: ReadResult, verbose: bool = False) -> None:
    """What was read but not counted, per reason; with ``verbose``, the first
    :data:`IDS_SHOWN` incomplete trace ids."""
    for reason, n in sorted(result.all_losses().items()):
        console.print(f"[yellow]{n} {reason}[/yellow]")
    if result.incomplete and verbose:
        ids = result.incomplete[:IDS_SHOWN]
        console.print("incomplete trace ids:")
        for tid in ids:
            console.print(f"  {tid}")
        total = max(len(result.incomplete), result.losses.get(LOSS_INCOMPLETE, 0))
        if total > len(ids):
            console.print(f"  and {total - len(ids)} more (see --format json)")


def print_rewards(console: Any, data: ReportData) -> None:
    """Mean reward per env class by e2e decile (1 = fastest tenth) and by turn count."""
    analyses = data.rewards.analyses()
    if not analyses:
        return
    t = table(["env class", "n", "by", "groups: label reward (n)"], right=(1,), pad_edge=True,
              title="mean reward by e2e decile (1 = fastest) and by turns")  # fmt: skip
    t.columns[3].no_wrap, t.columns[3].overflow = False, "fold"
    for a in analyses:
        deciles = "  ".join(f"{b.label}:{b.mean_reward:.2f}" for b in a.by_e2e_decile)
        turns = "  ".join(f"{b.label}:{b.mean_reward:.2f} ({b.n})" for b in a.by_turns)
        t.add_row(mid(a.env_class, GROUP_WIDTH), str(a.n), "e2e decile", deciles)
        t.add_row("", "", "turns", turns, end_section=True)
    console.print(t)


def _mean(column: Any) -> float | None:
    values = column[~np.isnan(column)] if column is not None else None
    return float(values.mean()) if values is not None and values.size else None


#: The waits' tables: title, the figures shown.
_WAIT_TABLES = (
    ("llm split: engine queue / prefill / decode, client (mean seconds)",
     ("llm", "llm_queue", "llm_prefill", "llm_decode", "llm_client")),
    ("event loop: own time, blocked by others' stalls (upper bound), own stalls "
     "(mean seconds)", ("e2e", "loop_own", "loop_blocked", "loop_stall")),
)  # fmt: skip


def print_waits(console: Any, data: ReportData, k: int = 5) -> None:
    """Where known: the engine's share of llm and the event-loop figures per group (mean
    seconds over the trajectories that have them), and the top loop culprits."""
    groups = data.groups()
    for title, fields in _WAIT_TABLES:
        rows = []
        for name, n, cols in groups:
            means = [_mean(cols.get(f)) for f in fields]
            if any(m is not None for m in means[1:]):
                rows.append([name, str(n), *("-" if m is None else f"{m:.3f}" for m in means)])
        if rows:
            t = table([data.group_label, "n", *fields], right=range(1, 2 + len(fields)),
                      title=title, pad_edge=True)  # fmt: skip
            print_fitted(console, t, rows)
    culprits = data.culprits()[:k]
    if culprits:
        t = table(["trajectory", "env class", "stalls", "own", "trace id"], right=(2, 3),
                  title="top loop culprits (own time in stalls, seconds)")  # fmt: skip
        rows = [[b.trajectory_id, str(b.env_class), f"{b.loop_stall:.3f}", f"{b.loop_own:.3f}",
                 b.trace_id] for b in culprits]  # fmt: skip
        print_fitted(console, t, rows, ids=(0, 1))
