"""The report's pictures: stacked bars per env class and a timeline of the slowest
trajectories (matplotlib, Agg), as a PNG and a self-contained HTML page."""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from otel_rollout._bands import DEFAULT_BANDS, BandRegistry
from otel_rollout.report._aggregate import ReportData
from otel_rollout.report._tables import _mean, headers, table_rows

#: Each band's colour, from the band registry.
COLORS = DEFAULT_BANDS.colours


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
        vals = [_mean(cols.get(name)) or 0.0 for _, _, cols in groups]
        if not any(vals):
            continue
        ax.bar(x + 0.5, vals, width=0.15, bottom=bottom, label=name, color=color,
               hatch="//", edgecolor="white")  # fmt: skip
        bottom += np.array(vals)


#: Waits drawn inside their band, hatched: (band whose colour they take, legend label).
WAITS_IN_BAND = {"env_queue": ("env", "env_queue (waiting for a thread, counted in env)")}


def _phase_style(
    phase: str, bands: Mapping[str, str] | None = None, registry: BandRegistry = DEFAULT_BANDS
) -> dict:
    """How a phase interval is drawn on the timeline: its band's colour; a wait in its
    band's colour, hatched and paler; anything else in ``other``'s."""
    colours = registry.colours
    if phase in colours:
        return {"color": colours[phase]}
    if phase in WAITS_IN_BAND:
        band = WAITS_IN_BAND[phase][0]
        return {"facecolor": colours[band], "alpha": 0.55, "hatch": "///",
                "edgecolor": "white"}  # fmt: skip
    rest = colours[registry.remainder]
    return {"color": colours.get((bands or {}).get(phase, registry.remainder), rest)}


def _timeline_legend(ax, registry: BandRegistry) -> None:
    from matplotlib.patches import Patch

    colours = registry.colours
    handles = [Patch(color=c, label=b) for b, c in colours.items()]
    for band, label in WAITS_IN_BAND.values():
        handles.append(Patch(facecolor=colours[band], alpha=0.55, hatch="///",
                             edgecolor="white", label=label))  # fmt: skip
    handles.append(Patch(facecolor=colours[registry.remainder], alpha=0.3,
                         label=f"no phase span ({registry.remainder})"))  # fmt: skip
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14),
              ncol=3, frameon=False)  # fmt: skip


def draw(
    data: ReportData, out_dir: Path, stem: str = "breakdown", jaeger_url: str | None = None
) -> tuple[Path, Path]:
    """Stacked bars per env class and a timeline of the slowest, as a PNG and an HTML page
    (trace ids linked to the Jaeger UI at ``jaeger_url``)."""
    import matplotlib.pyplot as plt

    fig = figure(data)
    top = [t.breakdown for t in data.slowest()]
    out_dir.mkdir(parents=True, exist_ok=True)
    png = out_dir / f"{stem}.png"
    fig.savefig(png, format="png", dpi=100)
    plt.close(fig)
    return png, _page(data, top, png.read_bytes(), out_dir / f"{stem}.html", jaeger_url)


def figure(data: ReportData):
    """The breakdown figure (matplotlib, Agg): bars per env class, the slowest
    trajectories' timeline and, where rewards are known, reward by latency decile."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = data.groups()
    rewards = data.rewards.analyses()
    if rewards:
        fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(19, 5.6))
        _plot_rewards(ax3, rewards)
    else:
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5.6))
    x = np.arange(len(groups))
    bottom = np.zeros(len(groups))
    for band in data.bands:
        vals = np.array([float(np.mean(cols[band.name])) for _, _, cols in groups])
        ax1.bar(x, vals, bottom=bottom, label=band.name, color=band.colour)
        bottom += vals
    _draw_llm_split(ax1, x, groups)
    ax1.set_xticks(x, [g for g, _, _ in groups])
    ax1.set_ylabel("mean seconds per trajectory")
    ax1.set_title("where trajectory time goes, per env class")
    ax1.legend(fontsize=8)
    slow = data.slowest()
    top = [t.breakdown for t in slow]
    t0 = min((b.start_time_ns for b in top), default=0)
    for row, (b, traj) in enumerate(zip(top, slow, strict=True)):
        ax2.broken_barh([((b.start_time_ns - t0) / 1e9, b.e2e)], (row - 0.4, 0.8),
                        facecolor=data.bands.colours[data.bands.remainder],
                        alpha=0.3)  # fmt: skip
        for ph in sorted(traj.phases, key=lambda p: p.phase in WAITS_IN_BAND):  # waits on top
            ax2.broken_barh(
                [((ph.start_ns - t0) / 1e9, (ph.end_ns - ph.start_ns) / 1e9)],
                (row - 0.35, 0.7),
                **_phase_style(ph.phase, registry=data.bands),
            )
    if top:
        _timeline_legend(ax2, data.bands)
    ax2.set_yticks(range(len(top)), [f"{b.trajectory_id}\n{b.trace_id[:8]}" for b in top])
    ax2.invert_yaxis()
    ax2.set_xlabel("seconds")
    ax2.set_title(f"timeline of the {len(top)} slowest trajectories")
    fig.tight_layout()
    return fig


def _page(data: ReportData, top, png_bytes: bytes, page_path: Path,
          jaeger_url: str | None) -> Path:  # fmt: skip
    b64 = base64.b64encode(png_bytes).decode()
    rows = "".join(
        "<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (e, n, *cells, f)) + "</tr>"
        for e, n, cells, f in table_rows(data)
    )
    from otel_rollout.report._timeline import jaeger_url as _jaeger

    base = html.escape(_jaeger(jaeger_url), quote=True)
    slow_rows = "".join(
        f"<tr><td>{html.escape(b.trajectory_id)}</td><td>{html.escape(str(b.env_class))}</td>"
        f'<td>{b.e2e:.3f}</td><td><a href="{base}/trace/{b.trace_id}" target="_blank">'
        f"<code>{b.trace_id}</code></a></td></tr>"
        for b in top
    )
    head = "".join(f"<th>{h}</th>" for h in headers(data))
    style = (
        "body{font-family:sans-serif;margin:2em}"
        ".scroll{overflow-x:auto;max-width:100%}"
        "table{border-collapse:collapse}"
        "td,th{padding:4px 8px;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}"
        "img{max-width:100%;height:auto}"
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8">
<title>otel-rollout breakdown</title><style>{style}</style>
</head><body><h1>otel-rollout: trajectory time breakdown</h1>
<img alt="breakdown" src="data:image/png;base64,{b64}">
<h2>Per env class (seconds: mean / p90 / max)</h2>
<div class="scroll"><table><tr>{head}</tr>{rows}</table></div>
<h2>Slowest trajectories</h2><p>Trace ids open in Jaeger ({base}).</p>
<div class="scroll"><table><tr><th>trajectory</th><th>env class</th><th>e2e s</th>
<th>trace id</th></tr>{slow_rows}</table></div></body></html>"""
    page_path.write_text(page, encoding="utf-8")
    return page_path


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
