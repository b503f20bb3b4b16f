"""The verdict: at most seven short lines, each within 80 columns, that answer where the
time went before any table (docs/demo.md, Output). A line with too much to say drops its
least important parts; an id is shortened in its middle."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from otel_rollout._accounting.slots import SLOW_FACTOR
from otel_rollout._bands import DEFAULT_BANDS, BandRegistry
from otel_rollout._base.text import mid

WIDTH = 80


def _fit(*candidates: str, width: int = WIDTH) -> str:
    """The first of ``candidates`` (most detailed first) that fits ``width``; else the
    last one, whose words are whole (a terminal wraps it, nothing is cut)."""
    for line in candidates:
        if len(line) <= width:
            return line
    return candidates[-1]


def _short(text: str, n: int) -> str:
    """A free text (a failure's reason) cut to ``n`` characters."""
    return text if len(text) <= n else text[: n - 1] + "…"


def _secs(ns: float) -> str:
    return f"{ns / 1e9:.2f} s"


def band_totals(
    groups: Sequence[tuple[str, int, Mapping[str, Any]]], bands: BandRegistry = DEFAULT_BANDS
) -> dict[str, float]:
    """Seconds per band (and ``e2e``) summed over every trajectory of every group."""
    out = {band: 0.0 for band in ("e2e", *bands.names, "env_queue")}
    for _, _, cols in groups:
        for band in out:
            col = cols.get(band)
            if col is not None and len(col):
                out[band] += float(col.sum())
    return out


def bound_line(
    groups: Sequence[tuple[str, int, Mapping[str, Any]]], bands: BandRegistry = DEFAULT_BANDS
) -> str | None:
    """``engine-bound: llm 58% of trajectory time (env 35%, setup 5%, bookkeeping 1%)``
    (categories under half a percent left out)."""
    totals = band_totals(groups, bands)
    bound_by = bands.bound_by()
    e2e = totals["e2e"]
    if e2e <= 0:
        return None
    share = {k: sum(totals[b] for b in names) / e2e for k, names in bound_by.items()}
    top = max(share, key=lambda k: share[k])
    rest = ", ".join(f"{k} {100 * v:.0f}%" for k, v in share.items() if k != top and v >= 0.005)
    line = f"{top}-bound: {'+'.join(bound_by[top])} {100 * share[top]:.0f}% of trajectory time"
    line += f" ({rest})" if rest else ""
    short = line
    if top == "env" and totals["env_queue"] > 0.25 * totals["env"]:
        line += f"; env_queue is {100 * totals['env_queue'] / totals['env']:.0f}% of env"
    return _fit(line, short)


def _batch_name(view: Any, n: int = 16) -> str:
    a = view.analysis
    return f"batch {view.step}" if view.step is not None else f"batch {mid(str(a.batch_id), n)}"


def slot_line(views: Sequence[Any]) -> str | None:
    """Where the batches' slots went (summed over batches), their drain and stragglers."""
    from otel_rollout.report._batches import short_secs, slots_said

    if not views:
        return None
    total: dict[str, int] = {}
    for v in views:
        for part, ns in v.analysis.slots.slot_ns.items():
            total[part] = total.get(part, 0) + ns
    drain = sum(v.analysis.drain_ns for v in views)
    n = sum(len(v.analysis.stragglers) for v in views)
    strag = f"{n} straggler{'s' if n != 1 else ''}" if n else "no stragglers"
    if len(views) == 1:
        heads = [f"{_batch_name(views[0], k)}: slots" for k in (16, 8)]
        tails = [f" (drain {short_secs(drain)}, {strag})", f" (drain {short_secs(drain)})", ""]
    else:
        heads = [f"{len(views)} batches: slots"]
        tails = [f" (drains {short_secs(drain)}, {strag})", f" (drains {short_secs(drain)})", ""]
    return _fit(*(f"{head} {slots_said(total, top=k)}{tail}"
                  for tail in tails for k in (3, 2) for head in heads))  # fmt: skip


def engine_line(views: Sequence[Any]) -> str | None:
    """``engine: idle 8% of wall; 9.9 of 16 slots generating on average; queue 4% of
    generate time`` (the queue where the engine's spans report it), over all batches."""
    if not views:
        return None
    wall = sum(v.analysis.wall_ns for v in views)
    if wall <= 0:
        return None
    idle = sum(v.analysis.engine_idle_ns for v in views) / wall
    mean = sum(v.analysis.llm_ns for v in views) / wall
    cap = sum(v.analysis.capacity * v.analysis.wall_ns for v in views) / wall
    cap_s = f"{cap:.0f}" if cap == int(cap) else f"{cap:.1f}"
    line = (f"engine: idle {100 * idle:.0f}% of wall; {mean:.1f} of {cap_s} slots generating "
            "on average")  # fmt: skip
    queued = [v.analysis for v in views if v.analysis.engine_queue_ns is not None]
    llm = sum(a.llm_ns for a in queued)
    if queued and llm > 0:
        q = sum(a.engine_queue_ns for a in queued) / llm
        return _fit(f"{line}; queue {100 * q:.0f}% of generate time",
                    f"{line}, {100 * q:.0f}% of it queued", line)  # fmt: skip
    return _fit(line)


def straggler_line(views: Sequence[Any], slowest: Sequence[Any]) -> str | None:
    """The batches' stragglers and what they cost, and the slowest trajectory with the band
    it spent most in (what does not fit 80 columns is left out whole, longest first)."""
    if not slowest and not views:
        return None
    heads: list[str] = []
    if views:
        strag = [s for v in views for s in v.analysis.slots.stragglers]
        if strag:
            cost = sum(v.analysis.straggler_cost_ns for v in views)
            heads = [f"stragglers: {len(strag)}, costing {_secs(cost)} of step time",
                     f"stragglers: {len(strag)}, costing {_secs(cost)}"]  # fmt: skip
        else:
            heads = [f"stragglers: none (none over {SLOW_FACTOR}x the median in a drain)",
                     "stragglers: none"]  # fmt: skip
    if not slowest:
        return _fit(*heads)
    b = slowest[0].breakdown
    top = max(b.bands.names, key=b.band) if b.e2e > 0 else "-"
    share = f", {top} {100 * b.band(top) / b.e2e:.0f}%" if b.e2e > 0 else ""
    combos = [(f"{h}; slowest:", t) for h in heads or [""]
              for t in (f", {b.e2e:.2f} s{share}", f", {b.e2e:.2f} s")]  # fmt: skip
    combos = [(h.lstrip("; ") or "slowest:", t) for h, t in combos]
    whole = [f"{h} {b.trajectory_id}{t}" for h, t in combos]  # the id whole first
    cut = [f"{h} {mid(b.trajectory_id, max(WIDTH - len(h) - 1 - len(t), 12))}{t}"
           for h, t in combos]  # fmt: skip
    return _fit(*whole, *cut, *heads)


def failure_line(failures: Mapping[str, int]) -> str | None:
    """``failed: 4 trajectories: KeyError: 'gsm8k' (4)``, most frequent reasons first."""
    total = sum(failures.values())
    if not total:
        return None
    reasons = sorted(failures.items(), key=lambda kv: -kv[1])
    out = []
    for k, n_chars in ((2, 40), (2, 20), (1, 40), (1, 20)):
        shown = "; ".join(f"{_short(why, n_chars)} ({n})" for why, n in reasons[:k])
        more = f"; {len(reasons) - k} more reasons" if len(reasons) > k else ""
        out.append(f"failed: {total} trajectories: {shown}{more}")
    return _fit(*out)


def loss_line(losses: Mapping[str, int], exported: int | None = None) -> str:
    """``export: no spans lost`` or the losses by reason, largest first."""
    lost = {k: n for k, n in losses.items() if n}
    if not lost:
        return "export: no spans lost" + (f" ({exported} exported)" if exported else "")
    ranked = sorted(lost.items(), key=lambda kv: -kv[1])
    out = []
    for k in range(len(ranked), 0, -1):
        parts = ", ".join(f"{n} {why}" for why, n in ranked[:k])
        more = f" (+{sum(n for _, n in ranked[k:])} more)" if k < len(ranked) else ""
        out.append(f"losses: {parts}{more}")
    return _fit(*out)


def verdict(
    groups: Sequence[tuple[str, int, Mapping[str, Any]]],
    views: Sequence[Any],
    slowest: Sequence[Any],
    *,
    failures: Mapping[str, int] | None = None,
    losses: Mapping[str, int] | None = None,
    exported: int | None = None,
    steps: Sequence[Any] = (),
    bands: BandRegistry = DEFAULT_BANDS,
) -> list[str]:
    """At most seven lines, each at most 80 characters: slots, engine, step, bound,
    stragglers, failures, losses (a line is left out when there is nothing to say)."""
    from otel_rollout.report._steps import step_line

    lines = [
        slot_line(views),
        engine_line(views),
        step_line(steps),
        bound_line(groups, bands),
        straggler_line(views, slowest),
        failure_line(failures or {}),
        loss_line(losses or {}, exported),
    ]
    return [ln for ln in lines if ln][:7]
