"""The report's pictures: stacked bars per env class and a timeline of the slowest
trajectories (matplotlib, Agg), as a PNG and a self-contained HTML page."""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path

import numpy as np

from otel_rollout import attributes as A
from otel_rollout.report._aggregate import ReportData
from otel_rollout.report._tables import HEADERS, table_rows

COLORS = {
    "llm": "#4C72B0",
    "env": "#55A868",
    "env_setup": "#C44E52",
    "env_teardown": "#8172B2",
    "other": "#CCB974",
}


#: The llm band's sub-parts, drawn as a narrow bar beside it where the engine reported them.
SPLIT_COLORS = {
    "llm_queue": "#A6BDDB",
    "llm_prefill": "#74A9CF",
    "llm_decode": "#2B8CBE",
    "llm_client": "#D0D1E6",
}


def _draw_llm_split(ax, x, groups) -> None:
    bottom = np.zeros(len(groups))
    for name, color in SPLIT_COLORS.items():
        vals = []
        for _, _, cols in groups:
            col = cols.get(name)
            known = col[~np.isnan(col)] if col is not None else np.array([])
            vals.append(float(np.mean(known)) if known.size else 0.0)
        if not any(vals):
            continue
        ax.bar(x + 0.5, vals, width=0.15, bottom=bottom, label=name, color=color,
               hatch="//", edgecolor="white")  # fmt: skip
        bottom += np.array(vals)


def draw(data: ReportData, out_dir: Path, stem: str = "breakdown") -> tuple[Path, Path]:
    """Stacked bars per env class + a timeline of the slowest; PNG and HTML."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = data.groups()
    rewards = data.rewards.analyses()
    if rewards:
        fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(19, 4.8))
        _plot_rewards(ax3, rewards)
    else:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    x = np.arange(len(groups))
    bottom = np.zeros(len(groups))
    for band in A.ALL_BANDS:
        vals = np.array([float(np.mean(cols[band])) for _, _, cols in groups])
        ax1.bar(x, vals, bottom=bottom, label=band, color=COLORS[band])
        bottom += vals
    _draw_llm_split(ax1, x, groups)
    ax1.set_xticks(x, [g for g, _, _ in groups])
    ax1.set_ylabel("mean seconds per trajectory")
    ax1.set_title("where trajectory time goes, per env class")
    ax1.legend()
    slow = data.slowest()
    top = [t.breakdown for t in slow]
    t0 = min((b.start_time_ns for b in top), default=0)
    for row, (b, traj) in enumerate(zip(top, slow, strict=True)):
        ax2.broken_barh([((b.start_time_ns - t0) / 1e9, b.e2e)], (row - 0.4, 0.8), color="#eeeeee")
        for ph in traj.phases:
            band = ph.phase if ph.phase in COLORS else "other"
            ax2.broken_barh(
                [((ph.start_ns - t0) / 1e9, (ph.end_ns - ph.start_ns) / 1e9)],
                (row - 0.35, 0.7),
                color=COLORS[band],
            )
    ax2.set_yticks(range(len(top)), [f"{b.trajectory_id}\n{b.trace_id[:8]}" for b in top])
    ax2.invert_yaxis()
    ax2.set_xlabel("seconds")
    ax2.set_title(f"timeline of the {len(top)} slowest trajectories")
    fig.tight_layout()
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / f"{stem}.png"
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    png.write_bytes(buf.getvalue())
    b64 = base64.b64encode(buf.getvalue()).decode()
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (e, n, *cells, f)) + "</tr>"
        for e, n, cells, f in table_rows(data)
    )
    slow_rows = "".join(
        f"<tr><td>{html.escape(b.trajectory_id)}</td><td>{html.escape(str(b.env_class))}</td>"
        f"<td>{b.e2e:.3f}</td><td><code>{b.trace_id}</code></td></tr>"
        for b in top
    )
    head = "".join(f"<th>{h}</th>" for h in HEADERS)
    style = (
        "body{font-family:sans-serif;margin:2em}"
        "td,th{padding:4px 8px;border-bottom:1px solid #ddd;text-align:right}"
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8">
<title>otel-rollout breakdown</title><style>{style}</style>
</head><body><h1>otel-rollout: trajectory time breakdown</h1>
<img alt="breakdown" src="data:image/png;base64,{b64}">
<h2>Per env class (seconds: mean / p90 / max)</h2><table><tr>{head}</tr>{rows}</table>
<h2>Slowest trajectories</h2><table><tr><th>trajectory</th><th>env class</th><th>e2e s</th>
<th>trace id</th></tr>{slow_rows}</table></body></html>"""
    page_path = out_dir / f"{stem}.html"
    page_path.write_text(page, encoding="utf-8")
    return png, page_path


def _plot_rewards(ax, analyses) -> None:
    """Mean reward by e2e decile, a line per env class (do slow trajectories succeed less?)."""
    for a in analyses:
        xs = [b.label for b in a.by_e2e_decile]
        ax.plot(xs, [b.mean_reward for b in a.by_e2e_decile], marker="o",
                label=f"{a.env_class} (n={a.n})")  # fmt: skip
    ax.set_xticks(range(1, 11))
    ax.set_xlabel("e2e decile (1 = fastest tenth)")
    ax.set_ylabel("mean reward")
    ax.set_title("reward against latency, per env class")
    ax.legend()
