"""The screen of ``otel-rollout top`` as rich text, from the live state: a pure function of
what is known and how it is viewed, so the terminal app, ``--once`` and the tests show
the same thing. Fits 80x24; more rows or columns show more running trajectories."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from rich.console import Group
from rich.text import Text

from otel_rollout import attributes as A
from otel_rollout._export.console_render import format_duration
from otel_rollout.live._state import WAITS, LiveState, Running
from otel_rollout.report._batches import BatchView

_BAR = "█"
_EMPTY_BAR = "░"
_SPARK = "▁▂▃▄▅▆▇█"
_BAND_STYLE = {A.PHASE_LLM: "cyan", A.PHASE_ENV: "yellow", A.PHASE_ENV_SETUP: "magenta",
               A.PHASE_ENV_TEARDOWN: "magenta", A.BAND_OTHER: "blue"}  # fmt: skip
SORTS = ("age", "phase", "env")
#: Lines the fixed sections take at most (the running table gets the rest).
_FIXED = 19


@dataclass
class View:
    """How the state is looked at: the keys' effects, and lines about the sources."""

    window_s: float = 300.0
    env: str | None = None
    sort: str = "age"
    selected: int = 0
    paused: bool = False
    processes: bool = False
    notes: list[str] = field(default_factory=list)
    live: str = "waiting"  # "live", "waiting", "stale ...", "paused"


def _secs(ns: float) -> str:
    return format_duration(max(0.0, ns) * 1e-9)


def _pct(x: float) -> str:
    return f"{100 * x:4.1f}%"


def spark(values: list[int], width: int) -> str:
    """A sparkline of the last ``width`` values, scaled to their peak."""
    vals = values[-width:]
    peak = max(vals, default=0)
    if peak <= 0:
        return _SPARK[0] * len(vals)
    return "".join(_SPARK[min(7, round(7 * v / peak))] for v in vals)


def header(state: LiveState, view: View, width: int) -> list[Text]:
    now = state.clock_ns()
    procs = state.processes.values()
    services = sorted({p.service for p in procs if p.service})
    runs = sorted({p.run_id for p in procs if p.run_id})
    first, last = state.first_start_ns, state.last_end_ns
    if first is None:
        up = "up -"
    elif view.live.startswith("stale") and last is not None:
        up = f"ran {_secs(last - first)}"
    else:
        up = f"up {_secs(now - first)}"
    t = Text("otel-rollout top", style="bold")
    t.append(f"  {', '.join(services) or '-'}  run {', '.join(runs) or '-'}  {up}")
    if len(state.processes) > 1:
        t.append(f"  {len(state.processes)} processes")
    status = "paused" if view.paused else view.live
    style = "green" if status == "live" else "yellow"
    t.append(" " * max(1, width - len(t.plain) - len(status) - 2))
    t.append(f"● {status}", style=style)
    running = state.running_by_env()
    done = state.finished_by_env
    envs = sorted(set(done) | set(running))
    cells = [f"{e or '-'} {done.get(e, 0)}/{running.get(e, 0)}" for e in envs]
    line = Text(f"done/running {sum(done.values())}/{sum(running.values())}", style="bold")
    if cells:
        line.append("  " + "  ".join(cells))
    line.append(f"  {state.rate():.1f}/s")
    if state.errors:
        line.append(f"  errors {state.errors}", style="red")
    if view.env is not None:
        line.append(f"  [env {view.env}]", style="reverse")
    return [t, line]


def bands(state: LiveState, view: View, width: int) -> list[Text]:
    n, e2e, band_ns, wait_ns, known = state.window(view.window_s, view.env)
    minutes = view.window_s / 60
    title = Text(f"where time goes, last {minutes:g} min", style="bold")
    if not n:
        title.append("  (no trajectory finished yet)")
        return [title]
    title.append(f"  {n} trajectories, mean e2e {_secs(e2e / n)}")
    out = [title]
    bar_w = max(10, width - 34)
    for band, v in zip(A.ALL_BANDS, band_ns, strict=True):
        share = v / e2e if e2e else 0.0
        filled = round(bar_w * share)
        line = Text(f"  {band:<13}")
        line.append(_BAR * filled, style=_BAND_STYLE[band])
        line.append(_EMPTY_BAR * (bar_w - filled), style="dim")
        line.append(f" {_pct(share)} {_secs(v / n):>8}")
        out.append(line)
    parts = []
    for name, v, k in zip(WAITS, wait_ns, known, strict=True):
        if k:
            parts.append(f"{name.removeprefix('llm_')} {_pct(v / e2e).strip()}")
    out.append(Text("  waits  " + ("  ".join(parts) if parts else "none known"), style="dim"))
    return out


def _age_row(r: Running, now: int, mark: str, width: int) -> Text:
    phase = r.phase or "-"
    in_phase = _secs(now - r.phase_start_ns) if r.phase_start_ns and not r.inferred else ""
    name = r.trajectory_id or "(inferred)"
    t = Text(f"{mark}{name[:16]:<16} {(r.env_class or '-')[:10]:<10} ")
    t.append(f"{phase[:12]:<12}", style=_BAND_STYLE.get(phase, ""))
    t.append(f" {in_phase:>8} {_secs(now - r.start_ns):>9}  ")
    t.append(r.trace_id[: max(0, width - len(t.plain))], style="dim")
    return t


def sort_running(rows: list[Running], key: str) -> list[Running]:
    if key == "phase":
        return sorted(rows, key=lambda r: (r.phase, r.start_ns))
    if key == "env":
        return sorted(rows, key=lambda r: (r.env_class, r.start_ns))
    return sorted(rows, key=lambda r: r.start_ns)


def selectable(state: LiveState, view: View) -> list[tuple[str, str]]:
    """(trace id, label) of what the cursor moves over: running rows, then stragglers."""
    rows = [r for r in state.running() if view.env is None or r.env_class == view.env]
    out = [(r.trace_id, r.trajectory_id) for r in sort_running(rows, view.sort)]
    for v in reversed(state.batches.verdicts):
        out.extend((b.trace_id, b.trajectory_id) for b in reversed(v.analysis.stragglers))
    return out


def batch(state: LiveState, view: View, width: int, rows_left: int) -> list[Text]:
    now = state.clock_ns()
    running = [r for r in state.running() if view.env is None or r.env_class == view.env]
    cur = state.batches.current()
    if cur is None:
        title = Text("running", style="bold")
    else:
        bid, analysis, start = cur
        title = Text(f"batch {bid}", style="bold")
        title.append(f"  {_secs(now - start)} elapsed")
        if analysis is not None:
            title.append(f"  {analysis.trajectories} finished, median finish "
                         f"{_secs(analysis.median_finish_ns)}")  # fmt: skip
        running = [r for r in running if r.batch_id in (bid, "")]
    title.append(f"  {len(running)} running")
    out = [title]
    if state.demand:
        d = list(state.demand)
        line = Text("  engine demand ")
        line.append(spark(d, max(10, width - 40)), style="cyan")
        line.append(f" now {d[-1]}, peak {max(d)}")
        out.append(line)
    elif cur is not None and cur[1] is not None:
        out.append(Text(f"  engine demand: peak {cur[1].llm_concurrency_max} in generate "
                        "(finished ones; no in-flight records)", style="dim"))  # fmt: skip
    if not running:
        return out
    out.append(Text(f"  {'trajectory':<16} {'env':<10} {'phase':<12} {'in phase':>8} "
                    f"{'age':>9}  trace [sort {view.sort}]", style="dim"))  # fmt: skip
    ids = [t for t, _ in selectable(state, view)]
    sel = ids[view.selected] if 0 <= view.selected < len(ids) else None
    shown = sort_running(running, view.sort)
    limit = max(1, rows_left - len(out))
    for r in shown[:limit]:
        mark = "▶ " if r.trace_id == sel else "  "
        out.append(_age_row(r, now, mark, width))
    if len(shown) > limit:
        out[-1] = Text(f"  ... {len(shown) - limit + 1} more", style="dim")
    return out


def verdicts(state: LiveState, view: View, width: int, rows: int) -> list[Text]:
    views: list[BatchView] = list(state.batches.verdicts)[-max(1, rows - 1) :]
    if not views:
        return []
    out = [Text("last batches    wall    tail  tail band    stragglers", style="bold")]
    ids = [t for t, _ in selectable(state, view)]
    sel = ids[view.selected] if 0 <= view.selected < len(ids) else None
    for v in reversed(views):
        a = v.analysis
        dom = a.dominant_tail_band
        band = f"{dom} {100 * a.tail_band_frac[dom]:.0f}%" if dom else "-"
        name = f"step {v.step}" if v.step is not None else str(a.batch_id)
        line = Text(f"  {name[:12]:<12} {_secs(a.wall_ns):>7} {100 * a.tail_frac:5.0f}%  "
                    f"{band:<12} {len(a.stragglers)}: ")  # fmt: skip
        strag = list(reversed(a.stragglers))
        for b in strag[:3]:
            line.append(b.trace_id[:8] + " ", style="reverse" if b.trace_id == sel else "dim")
        line.truncate(width)
        out.append(line)
    return out


def export_line(state: LiveState, extra: dict[str, int]) -> Text:
    total: dict[str, int] = {}
    for counts in state.writer_losses.values():
        for why, n in counts.items():
            total[why] = total.get(why, 0) + n
    total = {k: v for k, v in total.items() if v}
    t = Text("export  ", style="bold")
    if total:
        t.append("dropped " + ", ".join(f"{k} {v}" for k, v in sorted(total.items())), "red")
    else:
        t.append("no spans lost", style="green")
    others = {k: v for k, v in extra.items() if v}
    if others:
        t.append("  reader: " + ", ".join(f"{k} {v}" for k, v in others.items()), "yellow")
    return t


def processes(state: LiveState, width: int) -> list[Text]:
    out = [Text("process                  finished  mean e2e   llm   env  setup tdown other",
                style="bold")]  # fmt: skip
    for p in sorted(state.processes.values(), key=lambda p: (p.host or "", p.pid or 0)):
        name = f"{p.host or '?'}/{p.pid or '?'}"
        mean = _secs(p.e2e_ns / p.finished) if p.finished else "-"
        shares = " ".join(f"{100 * v / p.e2e_ns:4.0f}%" if p.e2e_ns else "    -"
                          for v in p.band_ns)  # fmt: skip
        out.append(Text(f"  {name[:22]:<22} {p.finished:>8} {mean:>9} {shares}"[:width]))
    return out


def render(state: LiveState, view: View, width: int = 80, height: int = 24,
           extra_losses: dict[str, int] | None = None) -> Group:  # fmt: skip
    """The whole screen in ``height`` lines (the app's key line not counted)."""
    lines: list[Text] = header(state, view, width)
    if view.processes:
        lines += processes(state, width)
    else:
        lines += bands(state, view, width)
    tail = verdicts(state, view, width, rows=4 if height >= 22 else 2)
    bottom = [export_line(state, extra_losses or {})]
    wrapped = [w for n in view.notes for w in textwrap.wrap(n, width, subsequent_indent="  ")]
    bottom += [Text(w, style="yellow") for w in wrapped[:4]]
    rows_left = height - len(lines) - len(tail) - len(bottom)
    lines += batch(state, view, width, rows_left)
    lines += tail + bottom
    for line in lines:
        line.no_wrap = True
        line.overflow = "ellipsis"
        line.truncate(width)
    return Group(*lines[: max(1, height)])
