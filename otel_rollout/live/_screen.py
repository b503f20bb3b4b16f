"""The screen of ``otel-rollout top`` as rich text: a pure function of the live state and
the view, shared by the app, ``--once`` and the tests (docs/live.md, The screen)."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field

from rich.console import Group
from rich.text import Text

from otel_rollout import attributes as A
from otel_rollout._accounting.batch_analysis import BatchAnalysis
from otel_rollout._accounting.in_flight import OpenStep
from otel_rollout._bands import DEFAULT_BANDS
from otel_rollout._base.text import mid
from otel_rollout._export.console_render import format_duration
from otel_rollout.live._state import WAITS, LiveState, Running
from otel_rollout.report._batches import SAYS, BatchView, slots_said

_SPARK = "▁▂▃▄▅▆▇█"
#: Each band's colour, from the band registry (rich shows the nearest the terminal has).
_BAND_STYLE = DEFAULT_BANDS.colours
#: The orders of the running trajectories (``s`` cycles them).
_SORT_KEYS = {
    "age": lambda r: r.start_ns,
    "phase": lambda r: (r.phase, r.start_ns),
    "env": lambda r: (r.env_class, r.start_ns),
}
SORTS = tuple(_SORT_KEYS)


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
    out = [t, line]
    steps = state.steps()
    if steps:
        out.append(step_line(steps, now))
    return out


def step_line(steps: list[OpenStep], now: int) -> Text:
    """``step 12: run_training for 34.1s (step 1m02s)``: the latest open step's phase and
    how long it has been in it; a hung step is a phase whose time only grows."""
    st = steps[0]
    name = f"step {st.number}" if st.number >= 0 else "step"
    line = Text(f"{name}: ", style="bold")
    if st.phase:
        line.append(f"{st.phase} for {_secs(now - st.phase_start_ns)}")
    else:
        line.append("between phases")
    line.append(f"  (step {_secs(now - st.start_ns)})")
    if len(steps) > 1:
        line.append(f"  +{len(steps) - 1} more processes in a step")
    return line


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
        out.append(Text.assemble(f"  {band:<13}", ("█" * filled, _BAND_STYLE[band]),
                                 ("░" * (bar_w - filled), "dim"),
                                 f" {_pct(share)} {_secs(v / n):>8}"))  # fmt: skip
    parts = [f"{name.removeprefix('llm_')} {_pct(v / e2e).strip()}"
             for name, v, k in zip(WAITS, wait_ns, known, strict=True) if k]  # fmt: skip
    out.append(Text("  waits  " + ("  ".join(parts) if parts else "none known"), style="dim"))
    return out


#: The phase column of a trajectory in no phase span now: between two phases, or in a wait
#: that becomes a span only when it ends (a thread pool's queue: ``env_queue``).
NO_PHASE = "no phase"


def _age_row(r: Running, now: int, mark: str, width: int) -> Text:
    phase = r.phase or NO_PHASE
    in_phase = _secs(now - r.phase_start_ns) if r.phase_start_ns and not r.inferred else ""
    name = r.trajectory_id or "(inferred)"
    t = Text(f"{mark}{mid(name, 16):<16} {mid(r.env_class or '?', 10):<10} ")
    t.append(f"{phase[:12]:<12}", style=_BAND_STYLE.get(phase, "dim"))
    t.append(f" {in_phase:>8} {_secs(now - r.start_ns):>9}  ")
    t.append(r.trace_id[: max(0, width - len(t.plain))], style="dim")
    return t


def sort_running(rows: list[Running], key: str) -> list[Running]:
    return sorted(rows, key=_SORT_KEYS[key])


def selectable(state: LiveState, view: View) -> list[tuple[str, str]]:
    """(trace id, label) of what the cursor moves over: running rows, then stragglers."""
    rows = [r for r in state.running() if view.env is None or r.env_class == view.env]
    out = [(r.trace_id, r.trajectory_id) for r in sort_running(rows, view.sort)]
    for v in reversed(state.batches.verdicts):
        out.extend((b.trace_id, b.trajectory_id) for b in reversed(v.analysis.stragglers))
    return out


def _selected(state: LiveState, view: View) -> str | None:
    ids = [t for t, _ in selectable(state, view)]
    return ids[view.selected] if 0 <= view.selected < len(ids) else None


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
            title.append(f"  {analysis.trajectories} finished")
        running = [r for r in running if r.batch_id in (bid, "")]
    title.append(f"  {len(running)} running")
    out = [title]
    if cur is not None:
        out.append(slots_now(running, cur[1], width))
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
    sel = _selected(state, view)
    shown = sort_running(running, view.sort)
    limit = max(1, rows_left - len(out))
    for r in shown[:limit]:
        mark = "▶ " if r.trace_id == sel else "  "
        out.append(_age_row(r, now, mark, width))
    if len(shown) > limit:
        out[-1] = Text(f"  ... {len(shown) - limit + 1} more", style="dim")
    return out


def slots_now(running: list[Running], done: BatchAnalysis | None, width: int) -> Text:
    """The running batch's slots: how many are held now and in what, then (when it fits)
    the slot account of its finished trajectories so far."""
    held: dict[str, int] = {}
    for r in running:
        what = SAYS.get(r.phase, "between phases")  # "" or "after <phase>": between
        held[what] = held.get(what, 0) + 1
    parts = ", ".join(f"{n} {what}" for what, n in sorted(held.items(), key=lambda kv: -kv[1]))
    line = Text(f"  slots  {len(running)} held" + (f": {parts}" if parts else ""))
    if done is not None and done.trajectories:
        for top in (3, 2):
            more = f"; so far {slots_said(done.slots.slot_ns, top=top)}"
            if len(line.plain) + len(more) <= width:
                line.append(more, style="dim")
                break
    return line


def verdicts(state: LiveState, view: View, width: int, rows: int) -> list[Text]:
    views: list[BatchView] = list(state.batches.verdicts)[-max(1, rows - 1) :]
    if not views:
        return []
    out = [Text("last batches    wall   drain   gen   env empty  stragglers", style="bold")]
    sel = _selected(state, view)
    for v in reversed(views):
        a = v.analysis
        sl = a.slots
        gen, env, empty = (f"{100 * sl.frac(p):.0f}%" for p in ("llm", "env", "empty"))
        name = f"step {v.step}" if v.step is not None else str(a.batch_id)
        line = Text(f"  {mid(name, 12):<12} {_secs(a.wall_ns):>7} {_secs(a.drain_ns):>7} "
                    f"{gen:>5} {env:>5} {empty:>5}  {len(a.stragglers)}: ")  # fmt: skip
        for b in list(reversed(a.stragglers))[:3]:
            line.append(b.trace_id[:8] + " ", style="reverse" if b.trace_id == sel else "dim")
        line.truncate(width)
        out.append(line)
    return out


def export_line(state: LiveState, extra: dict[str, int]) -> Text:
    total = state.export.export_losses
    t = Text("export  ", style="bold")
    if total:
        t.append("dropped " + ", ".join(f"{k} {v}" for k, v in total.items()), "red")
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
        out.append(Text(f"  {mid(name, 22):<22} {p.finished:>8} {mean:>9} {shares}"[:width]))
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
