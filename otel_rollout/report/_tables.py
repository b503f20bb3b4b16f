"""The report's tables (rich): per env class mean / p90 / max, and the slowest trajectories."""

from __future__ import annotations

from otel_rollout._accounting.summary import SKYRL_KEY_NAMES, summarize_columns
from otel_rollout.report._aggregate import ReportData
from otel_rollout.report._model import LOSS_INCOMPLETE, ReadResult


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


HEADERS = ["env class", "n", "e2e", "llm", "env", "env_setup", "env_teardown", "other",
           "env_queue", "finish_session", "frac env"]  # fmt: skip


def print_table(console, data: ReportData, title: str) -> None:
    """Per env class, a row per band: mean / p90 / max seconds and the band's share of the
    mean e2e (narrow enough for an 80-column terminal)."""
    from rich import box
    from rich.table import Table

    t = Table(title=f"{title}  (seconds)", box=box.SIMPLE_HEAD, padding=(0, 1))
    t.add_column(data.group_label, overflow="fold", max_width=20)
    t.add_column("n", justify="right", no_wrap=True)
    t.add_column("band", no_wrap=True)
    for h in ("mean", "p90", "max", "share"):
        t.add_column(h, justify="right", no_wrap=True)
    for env_class, n, columns in data.groups():
        s = summarize_columns(columns, prefix="")
        e2e_mean = s["trajectory_time_completion_mean"]
        for i, key in enumerate(SKYRL_KEY_NAMES):
            m, p, x = (s[f"trajectory_time_{key}_{st}"] for st in ("mean", "p90", "max"))
            band = "e2e" if key == "completion" else key
            share = "" if i == 0 else (f"{100 * m / e2e_mean:.0f}%" if e2e_mean > 0 else "-")
            t.add_row(env_class if i == 0 else "", str(n) if i == 0 else "", band,
                      f"{m:.3f}", f"{p:.3f}", f"{x:.3f}", share,
                      end_section=False)  # fmt: skip
        t.add_row("", "", "frac env", f"{s['frac_time_in_env']:.3f}", "", "", "",
                  end_section=True)  # fmt: skip
    console.print(t)


def print_slowest(console, data: ReportData) -> None:
    """The slowest trajectories: id, env class, e2e, the band they spent most in, trace id."""
    from rich import box
    from rich.table import Table

    t = Table(title="slowest trajectories (seconds)", box=box.SIMPLE_HEAD, padding=(0, 1),
              pad_edge=False)  # fmt: skip
    t.add_column("trajectory", overflow="fold", ratio=3)
    t.add_column("env class", overflow="fold", ratio=2)
    t.add_column("e2e", justify="right", no_wrap=True, min_width=6)
    t.add_column("most in", no_wrap=True, min_width=8)
    t.add_column("trace id", no_wrap=True, min_width=32)
    for b in (t.breakdown for t in data.slowest()):
        top = max(("llm", "env", "env_setup", "env_teardown", "other"), key=b.band)
        share = f"{top} {100 * b.band(top) / b.e2e:.0f}%" if b.e2e > 0 else "-"
        t.add_row(b.trajectory_id, str(b.env_class), f"{b.e2e:.3f}", share, b.trace_id)
    console.print(t)


#: Trace ids listed on the terminal before "and N more (see --format json)".
IDS_SHOWN = 10


def print_losses(console, result: ReadResult, verbose: bool = False) -> None:
    """What was read but not counted, per reason; with ``verbose``, the first
    :data:`IDS_SHOWN` incomplete trace ids (``--format json`` lists them all)."""
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


def print_rewards(console, data: ReportData) -> None:
    """Mean reward per env class by e2e decile (1 = fastest tenth) and by turn count."""
    from rich import box
    from rich.table import Table

    analyses = data.rewards.analyses()
    if not analyses:
        return
    t = Table(title="mean reward by e2e decile (1 = fastest) and by turns", box=box.SIMPLE_HEAD,
              padding=(0, 1))  # fmt: skip
    t.add_column("env class", overflow="fold", max_width=20)
    t.add_column("n", justify="right", no_wrap=True)
    t.add_column("by", no_wrap=True)
    t.add_column("groups: label reward (n)", overflow="fold")
    for a in analyses:
        deciles = "  ".join(f"{b.label}:{b.mean_reward:.2f}" for b in a.by_e2e_decile)
        turns = "  ".join(f"{b.label}:{b.mean_reward:.2f} ({b.n})" for b in a.by_turns)
        t.add_row(a.env_class, str(a.n), "e2e decile", deciles)
        t.add_row("", "", "turns", turns, end_section=True)
    console.print(t)


def _mean(column) -> float | None:
    import numpy as np

    values = column[~np.isnan(column)] if column is not None else None
    return float(values.mean()) if values is not None and values.size else None


def print_waits(console, data: ReportData, k: int = 5) -> None:
    """Where known: the engine's share of llm and the event-loop figures per env class
    (mean seconds over the trajectories that have them), and the top loop culprits."""
    from rich import box
    from rich.table import Table

    groups = data.groups()
    for title, fields in (
        ("llm split: engine queue / prefill / decode, client (mean seconds)",
         ("llm", "llm_queue", "llm_prefill", "llm_decode", "llm_client")),
        ("event loop: own time, blocked by others' stalls (upper bound), own stalls "
         "(mean seconds)", ("e2e", "loop_own", "loop_blocked", "loop_stall")),
    ):  # fmt: skip
        rows = []
        for env_class, n, cols in groups:
            means = [_mean(cols.get(f)) for f in fields]
            if any(m is not None for m in means[1:]):
                rows.append((env_class, n, means))
        if not rows:
            continue
        t = Table(title=title, box=box.SIMPLE_HEAD, padding=(0, 1))
        t.add_column(data.group_label, overflow="fold", max_width=20)
        t.add_column("n", justify="right", no_wrap=True)
        for f in fields:
            t.add_column(f, justify="right", no_wrap=True)
        for env_class, n, means in rows:
            t.add_row(env_class, str(n), *("-" if m is None else f"{m:.3f}" for m in means))
        console.print(t)
    culprits = data.culprits()[:k]
    if culprits:
        t = Table(title="top loop culprits (own time in stalls, seconds)", box=box.SIMPLE_HEAD,
                  padding=(0, 1), pad_edge=False)  # fmt: skip
        t.add_column("trajectory", overflow="fold", ratio=3)
        t.add_column("env class", overflow="fold", ratio=2)
        t.add_column("stalls", justify="right", no_wrap=True)
        t.add_column("own", justify="right", no_wrap=True)
        t.add_column("trace id", no_wrap=True, min_width=32)
        for b in culprits:
            t.add_row(b.trajectory_id, str(b.env_class), f"{b.loop_stall:.3f}",
                      f"{b.loop_own:.3f}", b.trace_id)  # fmt: skip
        console.print(t)
