"""A timeline per batch (docs/batch.md): a row per trajectory by finish, the drain shaded,
the slot account over time underneath; a PNG and an HTML page (SVG, hover, Jaeger links)."""

from __future__ import annotations

import html
import os
from pathlib import Path

import numpy as np

from otel_rollout._accounting.batch_analysis import BatchAnalysis
from otel_rollout._accounting.breakdown import Breakdown, PhaseInterval
from otel_rollout._accounting.slots import EMPTY, SlotAccount
from otel_rollout._bands import DEFAULT_BANDS
from otel_rollout.report._batches import BatchView, drain_said, engine_said, slots_said

#: Jaeger's UI in the compose stack; ``--jaeger-url`` or ``OTEL_ROLLOUT_JAEGER_URL`` move it.
DEFAULT_JAEGER_URL = "http://localhost:16686"
JAEGER_URL_ENV = "OTEL_ROLLOUT_JAEGER_URL"
#: Rows drawn per batch: every straggler, and an even sample of the rest.
MAX_ROWS = 200
#: Batches drawn (the longest drains).
MAX_BATCHES_DRAWN = 10
#: Each band's colour, from the band registry.
COLORS = DEFAULT_BANDS.colours
#: Empty slots in the slot account's area.
EMPTY_COLOR = "#E4E4E4"
PART_COLORS = {**COLORS, EMPTY: EMPTY_COLOR}


def part_colours(account: SlotAccount) -> dict[str, str]:
    """The colour of each part of an account: its bands' (the registry's), then empty."""
    return {**account.bands.colours, EMPTY: EMPTY_COLOR}


def jaeger_url(arg: str | None = None) -> str:
    """The Jaeger UI base URL: the argument, else the variable, else the compose stack's."""
    url = arg or os.environ.get(JAEGER_URL_ENV, "").strip() or DEFAULT_JAEGER_URL
    return url.rstrip("/")


def rows(a: BatchAnalysis, breakdowns: list[Breakdown]) -> list[Breakdown]:
    """The trajectories drawn, by finish: all when few, else the stragglers and a sample."""
    order = sorted(breakdowns, key=lambda b: (b.end_time_ns, b.trajectory_id, b.trace_id))
    if len(order) <= MAX_ROWS:
        return order
    late = {id(b) for b in a.stragglers}
    rest = [b for b in order if id(b) not in late]
    room = max(MAX_ROWS - len(a.stragglers), 1)
    picked = {id(b) for b in rest[:: max(1, len(rest) // room)][:room]} | late
    return [b for b in order if id(b) in picked]


def _segments(b: Breakdown) -> list[PhaseInterval]:
    """The band intervals in drawing order: lowest priority first, so llm is on top."""
    ivs, index = b.phase_intervals(), b.bands.index
    return sorted(ivs, key=lambda p: -index[p.phase])


def draw_batch_png(view: BatchView, breakdowns: list[Breakdown], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    a = view.analysis
    shown = rows(a, breakdowns)
    s0 = a.start_ns
    height = 3 + min(len(shown), 60) * 0.12
    fig, (ax, ax2) = plt.subplots(
        2, 1, figsize=(11, height + 2), sharex=True, gridspec_kw={"height_ratios": [height, 2]}
    )
    for row, b in enumerate(shown):
        ax.broken_barh([((b.start_time_ns - s0) / 1e9, b.e2e)], (row - 0.4, 0.8),
                       color=COLORS["other"])  # fmt: skip
        for band, s, e in _segments(b):
            ax.broken_barh([((s - s0) / 1e9, (e - s) / 1e9)], (row - 0.4, 0.8), color=COLORS[band])
    drain, last = (a.slots.drain_start_ns - s0) / 1e9, a.wall_ns / 1e9
    for axis in (ax, ax2):
        axis.axvspan(drain, last, color="#999999", alpha=0.18, lw=0)
        axis.axvline(drain, color="black", lw=1, ls="--")
    ax.set_ylim(len(shown) - 0.5, -0.5)
    ax.set_yticks([])
    ax.set_ylabel(f"{len(shown)} of {a.trajectories} trajectories, by finish")
    ax.set_title(f"batch {view.name}: wall {a.wall_ns / 1e9:.2f} s; {drain_said(a)}",
                 fontsize=10)  # fmt: skip
    colours = part_colours(a.slots)
    handles = [matplotlib.patches.Patch(color=c, label=b) for b, c in colours.items()]
    ax.legend(handles=handles, loc="upper right", fontsize=8)
    tl = a.slots.timeline
    t = (tl.times_ns - s0) / 1e9
    parts = a.slots.parts
    ax2.stackplot(t, *(tl.column(p) for p in parts), colors=[colours[p] for p in parts],
                  step="post", lw=0)  # fmt: skip
    over = tl.column("overflow")
    if over.any():
        ax2.step(t, np.where(over > 0, a.capacity + over, np.nan), where="post",
                 color="black", lw=0.8, label="in flight beyond the slots")  # fmt: skip
        ax2.legend(loc="upper right", fontsize=8)
    ax2.set_ylim(0, max(a.capacity + int(over.max()), 1))
    ax2.set_ylabel(f"{a.capacity} slots")
    ax2.set_title(f"slots: {slots_said(a.slots.slot_ns, top=6)}; {engine_said(a)}",
                  fontsize=9, loc="left")  # fmt: skip
    ax2.set_xlabel("seconds since the batch started (drain shaded, its start dashed)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def tick_step(span_s: float, most: int = 10) -> float:
    """A round step (1, 2 or 5 times a power of ten) giving at most ``most`` ticks."""
    if span_s <= 0:
        return 1.0
    step = 10.0 ** np.floor(np.log10(span_s / most))
    for k in (1, 2, 5, 10):
        if span_s / (k * step) <= most:
            return float(k * step)
    return float(10 * step)


def _axis(x, y: float, wall_ns: int, left: float, right: float) -> list[str]:
    """An SVG time axis at height ``y``: a line, and ticks labelled in seconds."""
    out = [f'<line x1="{left}" x2="{right}" y1="{y}" y2="{y}" stroke="#444"/>']
    step = tick_step(wall_ns / 1e9)
    digits = max(0, -int(np.floor(np.log10(step)))) if step < 1 else 0
    k = 0
    while k * step <= wall_ns / 1e9 + 1e-12:
        tx = x(k * step * 1e9)
        out.append(f'<line x1="{tx:.1f}" x2="{tx:.1f}" y1="{y}" y2="{y + 4}" stroke="#444"/>')
        out.append(f'<text x="{tx:.1f}" y="{y + 14}" text-anchor="middle">'
                   f"{k * step:.{digits}f}</text>")  # fmt: skip
        k += 1
    out.append(f'<text x="{right}" y="{y + 26}" text-anchor="end">seconds since the batch '
               "started</text>")  # fmt: skip
    return out


def _tooltip(b: Breakdown, s0: int) -> str:
    bands = ", ".join(f"{band} {b.band(band):.3f}" for band in b.bands.names)
    return (f"{b.trajectory_id} ({b.env_class or '-'}): finish {(b.end_time_ns - s0) / 1e9:.3f} s, "
            f"e2e {b.e2e:.3f} s; {bands}; {b.turns} turns; trace {b.trace_id}")  # fmt: skip


def batch_svg(view: BatchView, breakdowns: list[Breakdown], jaeger: str) -> str:
    """The batch timeline as SVG: hover a row for its breakdown, click to open its trace."""
    a = view.analysis
    shown = rows(a, breakdowns)
    s0, wall = a.start_ns, max(a.wall_ns, 1)
    width, left, row_h, demand_h = 900, 14, 6, 80
    top, axis_h = 10, 32
    height = top + len(shown) * row_h + axis_h + 20 + demand_h + 20

    def x(t_ns: float) -> float:
        return left + (t_ns - s0) / wall * (width - 2 * left)

    def rel(t_ns: float) -> float:  # an offset from the batch start
        return x(s0 + t_ns)

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="sans-serif" font-size="10">']  # fmt: skip
    drain_x = x(a.slots.drain_start_ns)
    out.append(f'<rect x="{drain_x:.1f}" y="0" width="{x(a.end_ns) - drain_x:.1f}" '
               f'height="{height}" fill="#999" fill-opacity="0.18"><title>drain: '
               f'{a.drain_ns / 1e9:.3f} s</title></rect>')  # fmt: skip
    for row, b in enumerate(shown):
        y = top + row * row_h
        href = html.escape(f"{jaeger}/trace/{b.trace_id}", quote=True)
        out.append(f'<a href="{href}" target="_blank"><g><title>'
                   f"{html.escape(_tooltip(b, s0))}</title>")  # fmt: skip
        out.append(f'<rect x="{x(b.start_time_ns):.1f}" y="{y}" '
                   f'width="{max(x(b.end_time_ns) - x(b.start_time_ns), 0.5):.1f}" '
                   f'height="{row_h - 1}" fill="{COLORS["other"]}"/>')  # fmt: skip
        for band, s, e in _segments(b):
            out.append(f'<rect x="{x(s):.1f}" y="{y}" width="{max(x(e) - x(s), 0.3):.1f}" '
                       f'height="{row_h - 1}" fill="{COLORS[band]}"/>')  # fmt: skip
        out.append("</g></a>")
    out.append(f'<line x1="{drain_x:.1f}" x2="{drain_x:.1f}" y1="0" y2="{height}" '
               'stroke="black" stroke-dasharray="4 3">'
               "<title>drain start</title></line>")  # fmt: skip
    out.extend(_axis(rel, top + len(shown) * row_h + 4, wall, left, width - left))
    base = top + len(shown) * row_h + axis_h + 20 + demand_h
    out.extend(_slot_area(a, x, base, demand_h))
    out.append(f'<text x="{left}" y="{base + 14}">{a.capacity} slots: '
               f"{html.escape(slots_said(a.slots.slot_ns, top=6))}</text>")  # fmt: skip
    out.append("</svg>")
    return "\n".join(out)


def _slot_area(a: BatchAnalysis, x, base: float, h: float) -> list[str]:
    """The slot account over time as stacked SVG polygons, ``h`` pixels for the capacity."""
    tl = a.slots.timeline
    cap = max(a.capacity + int(tl.column("overflow").max()), 1)
    xs = [x(t) for t in tl.times_ns.tolist()]
    low = np.zeros(len(xs))
    out = []
    colours = part_colours(a.slots)
    for part in a.slots.parts:
        high = low + tl.column(part)
        if high.any() and (high > low).any():
            top = [f"{xs[i]:.1f},{base - high[i] / cap * h:.1f} "
                   f"{xs[min(i + 1, len(xs) - 1)]:.1f},{base - high[i] / cap * h:.1f}"
                   for i in range(len(xs))]  # fmt: skip
            bottom = [f"{xs[min(i + 1, len(xs) - 1)]:.1f},{base - low[i] / cap * h:.1f} "
                      f"{xs[i]:.1f},{base - low[i] / cap * h:.1f}"
                      for i in reversed(range(len(xs)))]  # fmt: skip
            frac = 100 * a.slots.frac(part)
            out.append(f'<polygon fill="{colours[part]}" points="{" ".join(top + bottom)}">'
                       f"<title>{part}: {frac:.0f}% of the slots</title></polygon>")  # fmt: skip
        low = high
    return out


def write_batch_pages(
    views: list[BatchView],
    breakdowns_of: dict[str, list[Breakdown]],
    out_dir: Path,
    jaeger: str | None = None,
) -> tuple[list[Path], Path | None]:
    """PNG timelines and one HTML page for the batches with the longest drains."""
    if not views:
        return [], None
    jaeger = jaeger_url(jaeger)
    drawn = sorted(views, key=lambda v: -v.analysis.drain_ns)[:MAX_BATCHES_DRAWN]
    drawn.sort(key=lambda v: v.analysis.start_ns)
    pngs, sections = [], []
    for i, v in enumerate(drawn):
        bds = breakdowns_of.get(v.analysis.batch_id or "", [])
        pngs.append(draw_batch_png(v, bds, out_dir / f"batch-{i}.png"))
        a = v.analysis
        strag = "".join(
            f"<tr><td>{html.escape(s.trajectory_id)}</td>"
            f"<td>{html.escape(str(s.breakdown.env_class))}</td>"
            f"<td>{s.duration_ns / 1e9:.3f}</td><td>{s.cost_ns / 1e9:.3f}</td>"
            f'<td><a href="{html.escape(jaeger)}/trace/{s.trace_id}"><code>{s.trace_id}'
            "</code></a></td></tr>"
            for s in sorted(a.slots.stragglers, key=lambda s: -s.cost_ns)
        )
        said = "; ".join((f"{a.capacity} slots: {slots_said(a.slots.slot_ns, top=6)}",
                          drain_said(a), engine_said(a)))  # fmt: skip
        sections.append(
            f"<h2>batch {html.escape(v.name)}</h2><p>{a.trajectories} trajectories, wall "
            f"{a.wall_ns / 1e9:.3f} s; {html.escape(said)}.</p>"
            f'<div class="scroll">{batch_svg(v, bds, jaeger)}</div><h3>stragglers</h3>'
            '<div class="scroll"><table><tr><th>trajectory</th><th>env class</th>'
            f"<th>duration s</th><th>cost s</th><th>trace id</th></tr>{strag}</table></div>"
        )
    legend = " ".join(
        f'<span style="background:{c};padding:0 6px">&nbsp;</span> {b}'
        for b, c in PART_COLORS.items()
    )
    page = out_dir / "batches.html"
    page.write_text(
        '<!doctype html><html><head><meta charset="utf-8"><title>otel-rollout batches'
        "</title><style>body{font-family:sans-serif;margin:2em}"
        "td,th{padding:2px 8px;white-space:nowrap}.scroll{overflow-x:auto}"
        "</style></head><body><h1>otel-rollout: batches</h1><p>One row per trajectory by "
        "finish; the drain (the first slot left empty for good to the last finish) shaded; "
        "under the rows, the slots over time by band, empty ones grey. Hover a row for its "
        f"breakdown, click it to open the trace in Jaeger ({html.escape(jaeger)}).</p>"
        f"<p>{legend}</p>{''.join(sections)}</body></html>",
        encoding="utf-8",
    )
    return pngs, page
