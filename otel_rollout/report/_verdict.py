"""The verdict: at most five short lines that answer where the time went, before any table.

1. what bound the run: engine (``llm``), env (``env``), setup (``env_setup`` +
   ``env_teardown``) or bookkeeping (``other``), by share of all trajectory time;
2. the batch tail: how long the step waited after its median finish, and on what;
3. the stragglers: how many, and the slowest one (its trace id is in the table below);
4. failed trajectories, by reason (only when some failed);
5. export losses: spans that never reached the backend or the file.

Each line fits an 80-column terminal. Pure functions of what the report already holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from otel_rollout import attributes as A

#: What bound a run, by the category holding the largest share of trajectory time.
BOUND_BY = {
    "engine": ("llm",),
    "env": ("env",),
    "setup": ("env_setup", "env_teardown"),
    "bookkeeping": ("other",),
}
WIDTH = 80


def _fit(line: str, width: int = WIDTH) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def _short(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"


def band_totals(groups: Sequence[tuple[str, int, Mapping[str, Any]]]) -> dict[str, float]:
    """Seconds per band (and ``e2e``) summed over every trajectory of every group."""
    out = {band: 0.0 for band in ("e2e", *A.ALL_BANDS, "env_queue")}
    for _, _, cols in groups:
        for band in out:
            col = cols.get(band)
            if col is not None and len(col):
                out[band] += float(col.sum())
    return out


def bound_line(groups: Sequence[tuple[str, int, Mapping[str, Any]]]) -> str | None:
    """``engine-bound: llm 58% of trajectory time (env 35%, setup 5%, bookkeeping 1%)``
    (categories under half a percent left out)."""
    totals = band_totals(groups)
    e2e = totals["e2e"]
    if e2e <= 0:
        return None
    share = {k: sum(totals[b] for b in bands) / e2e for k, bands in BOUND_BY.items()}
    top = max(share, key=share.get)
    rest = ", ".join(f"{k} {100 * v:.0f}%" for k, v in share.items() if k != top and v >= 0.005)
    line = f"{top}-bound: {'+'.join(BOUND_BY[top])} {100 * share[top]:.0f}% of trajectory time"
    line += f" ({rest})" if rest else ""
    if top == "env" and totals["env_queue"] > 0.25 * totals["env"]:
        line += f"; env_queue is {100 * totals['env_queue'] / totals['env']:.0f}% of env"
    return _fit(line)


def tail_line(views: Sequence[Any]) -> str | None:
    """The batch with the longest tail: how long the step waited after its median finish,
    and which bands the trajectories still running spent it in."""
    from otel_rollout.report._batches import tail_spent_on

    if not views:
        return None
    worst = max(views, key=lambda v: v.analysis.tail_ns)
    a = worst.analysis
    name = f"step {worst.step}" if worst.step is not None else _short(str(a.batch_id), 16)
    spent = tail_spent_on(a, top=2) or "nothing"
    figures = (f"{a.tail_ns / 1e9:.2f} s of {a.wall_ns / 1e9:.2f} s wall "
               f"({100 * a.tail_frac:.0f}%), on {spent}")  # fmt: skip
    if len(views) == 1:
        return _fit(f"batch {name}: tail {figures}")
    return _fit(f"{len(views)} batches; longest tail {name}: {figures}")


def straggler_line(views: Sequence[Any], slowest: Sequence[Any]) -> str | None:
    """How many stragglers, and the slowest trajectory with the band it spent most in."""
    n = sum(len(v.analysis.stragglers) for v in views)
    if not slowest:
        return None
    b = slowest[0].breakdown
    top = max((*A.BANDS, "other"), key=b.band) if b.e2e > 0 else "-"
    share = f"{top} {100 * b.band(top) / b.e2e:.0f}%" if b.e2e > 0 else "-"
    head = f"stragglers: {n} after the p90 finish; slowest:" if views else "slowest:"
    return _fit(f"{head} {_short(b.trajectory_id, 24)}, {b.e2e:.2f} s, {share}")


def failure_line(failures: Mapping[str, int]) -> str | None:
    """``failed: 4 trajectories: KeyError: 'gsm8k' (4)``, most frequent reasons first."""
    total = sum(failures.values())
    if not total:
        return None
    reasons = sorted(failures.items(), key=lambda kv: -kv[1])
    shown = "; ".join(f"{_short(why, 40)} ({n})" for why, n in reasons[:2])
    more = f"; {len(reasons) - 2} more reasons" if len(reasons) > 2 else ""
    return _fit(f"failed: {total} trajectories: {shown}{more}")


def loss_line(losses: Mapping[str, int], exported: int | None = None) -> str:
    """``export: no spans lost`` or the losses by reason, largest first."""
    lost = {k: n for k, n in losses.items() if n}
    if not lost:
        return "export: no spans lost" + (f" ({exported} exported)" if exported else "")
    parts = ", ".join(f"{n} {why}" for why, n in sorted(lost.items(), key=lambda kv: -kv[1]))
    return _fit(f"losses: {parts}")


def verdict(
    groups: Sequence[tuple[str, int, Mapping[str, Any]]],
    views: Sequence[Any],
    slowest: Sequence[Any],
    *,
    failures: Mapping[str, int] | None = None,
    losses: Mapping[str, int] | None = None,
    exported: int | None = None,
) -> list[str]:
    """At most five lines, each at most 80 characters: bound, tail, stragglers, failures,
    losses (a line is left out when there is nothing to say)."""
    lines = [
        bound_line(groups),
        tail_line(views),
        straggler_line(views, slowest),
        failure_line(failures or {}),
        loss_line(losses or {}, exported),
    ]
    return [ln for ln in lines if ln][:5]
