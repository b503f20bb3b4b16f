"""``report RUN --baseline OTHER_RUN``: per env class and band, both runs' means and p90s,
the difference with a seeded bootstrap 95% interval, marked where Welch p-values adjusted
together (Holm) and the size of the difference both say so (docs/demo.md,
``--baseline``)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from otel_rollout._accounting.summary import SUMMARY_FIELDS
from otel_rollout._base.text import mid
from otel_rollout.report._aggregate import ReportData

#: Bootstrap resamples and seed: the interval is the same on every run of the report.
RESAMPLES = 2000
SEED = 0
#: Index draws held at once while resampling (bounds memory for large runs).
_BLOCK = 4_000_000
#: The chance of any false mark across all the comparisons of one report (Holm).
ALPHA = 0.05
#: The smallest difference marked: this share of the baseline's mean, and these seconds.
MIN_RELATIVE = 0.05
MIN_ABSOLUTE_S = 0.001


@dataclass(frozen=True)
class BandChange:
    """One band of one env class: the baseline's and the run's figures (seconds)."""

    env_class: str
    band: str
    n_baseline: int
    n_run: int
    mean_baseline: float
    mean_run: float
    p90_baseline: float
    p90_run: float
    diff: float  # mean_run - mean_baseline
    ci_low: float
    ci_high: float
    #: Welch t-test of the two means, and that p-value adjusted (Holm) over every
    #: comparison of the report; NaN where a run has fewer than two trajectories.
    p_value: float = float("nan")
    p_adjusted: float = float("nan")
    #: Beyond noise after the adjustment and at least the practical minimum.
    marked: bool = False


def practically_large(diff: float, mean_baseline: float) -> bool:
    """At least :data:`MIN_RELATIVE` of the baseline's mean and :data:`MIN_ABSOLUTE_S`."""
    return abs(diff) >= max(MIN_RELATIVE * abs(mean_baseline), MIN_ABSOLUTE_S)


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 500):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):  # fmt: skip
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-14:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), for 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))  # fmt: skip
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _betacf(a, b, x) / a
    return 1.0 - math.exp(log_front) * _betacf(b, a, 1.0 - x) / b


def welch_p(baseline: np.ndarray, run: np.ndarray) -> float:
    """Two-sided p-value of Welch's t-test for equal means; NaN with fewer than two values
    on a side. Two constant samples give 0 when their means differ, 1 when they do not."""
    nx, ny = len(baseline), len(run)
    if nx < 2 or ny < 2:
        return float("nan")
    vx, vy = float(np.var(baseline, ddof=1)) / nx, float(np.var(run, ddof=1)) / ny
    diff = float(np.mean(run) - np.mean(baseline))
    se2 = vx + vy
    if se2 <= 0.0 or not math.isfinite(se2):
        return 0.0 if diff != 0.0 else 1.0
    t = diff / math.sqrt(se2)
    df = se2 * se2 / (vx * vx / (nx - 1) + vy * vy / (ny - 1))
    return min(1.0, betainc(df / 2.0, 0.5, df / (df + t * t)))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment: the smallest p times m, the next times m - 1, ...,
    kept non-decreasing and at most 1. NaNs stay NaN and do not count in m."""
    order = sorted((i for i, p in enumerate(p_values) if not math.isnan(p)),
                   key=lambda i: p_values[i])  # fmt: skip
    m = len(order)
    out = [float("nan")] * len(p_values)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        out[i] = running
    return out


def _boot_means(x: np.ndarray, rng: np.random.Generator, b: int) -> np.ndarray:
    """``b`` bootstrap means of ``x``, drawn in blocks."""
    n = len(x)
    out = np.empty(b)
    per = max(1, _BLOCK // max(n, 1))
    for i in range(0, b, per):
        k = min(per, b - i)
        out[i : i + k] = x[rng.integers(0, n, size=(k, n))].mean(axis=1)
    return out


def bootstrap_diff(
    baseline: np.ndarray, run: np.ndarray, *, resamples: int = RESAMPLES, seed: int = SEED
) -> tuple[float, float]:
    """95% percentile bootstrap interval for ``mean(run) - mean(baseline)``."""
    rng = np.random.default_rng(seed)
    diffs = _boot_means(run, rng, resamples) - _boot_means(baseline, rng, resamples)
    low, high = np.percentile(diffs, [2.5, 97.5])
    return float(low), float(high)


def compare_columns(
    baseline: Mapping[str, Mapping[str, np.ndarray]],
    run: Mapping[str, Mapping[str, np.ndarray]],
    *,
    resamples: int = RESAMPLES,
    seed: int = SEED,
    alpha: float = ALPHA,
    fields: Sequence[str] = SUMMARY_FIELDS,
) -> list[BandChange]:
    """Every ``fields`` column of every env class present in both, tested together (Welch,
    Holm-adjusted, marked where also practically large); ``resamples`` 0: no interval."""
    rows = []
    for name, cols in run.items():
        if name not in baseline:
            continue
        for band in fields:
            x = np.asarray(baseline[name][band], dtype=float)
            y = np.asarray(cols[band], dtype=float)
            if not len(x) or not len(y) or not (x.any() or y.any()):
                continue  # a band neither run used
            if resamples > 0:
                low, high = bootstrap_diff(x, y, resamples=resamples, seed=seed)
            else:
                low = high = float("nan")
            rows.append((name, band, x, y, low, high, welch_p(x, y)))
    adjusted = holm([r[6] for r in rows])
    out = []
    for (name, band, x, y, low, high, p), p_adj in zip(rows, adjusted, strict=True):
        diff = float(np.mean(y) - np.mean(x))
        mark = bool(p_adj < alpha) and practically_large(diff, float(np.mean(x)))
        out.append(BandChange(
            name, band, len(x), len(y), float(np.mean(x)), float(np.mean(y)),
            float(np.percentile(x, 90)), float(np.percentile(y, 90)), diff, low, high,
            p, p_adj, mark,
        ))  # fmt: skip
    return out


def compare(
    baseline: ReportData, run: ReportData, *, resamples: int = RESAMPLES, seed: int = SEED
) -> list[BandChange]:
    """Every band of every env class present in both runs (:func:`compare_columns`)."""
    if baseline.bands != run.bands:
        raise ValueError(
            f"the baseline's bands ({', '.join(baseline.bands.names)}) are not the run's "
            f"({', '.join(run.bands.names)})"
        )
    base = {name: cols for name, _, cols in baseline.groups()}
    this = {name: cols for name, _, cols in run.groups()}
    return compare_columns(base, this, resamples=resamples, seed=seed, fields=run.fields)


def changes_json(changes: list[BandChange]) -> list[dict[str, Any]]:
    """The comparisons for ``--format json`` (NaN, where a figure is not known, as null)."""

    def plain(v: Any) -> Any:
        return None if isinstance(v, float) and math.isnan(v) else v

    return [{**{k: plain(v) for k, v in asdict(c).items()}, "beyond_noise": c.marked}
            for c in changes]  # fmt: skip


def print_changes(console: Any, changes: list[BandChange], baseline_name: str) -> None:
    """A table per env class (80 columns): means, the difference, its interval, the
    adjusted p-value and the mark; then what the mark means."""
    from otel_rollout.report._fit import table

    if not changes:
        console.print("no env class is in both runs: nothing to compare")
        return
    for env_class in dict.fromkeys(c.env_class for c in changes):
        rows = [c for c in changes if c.env_class == env_class]
        t = table(["band", "base", "run", "diff", "change", "95% CI of diff", "p holm", ""],
                  right=range(1, 8), title_justify="left",
                  title=f"{mid(env_class, 30)}: run (n={rows[0].n_run}) against baseline "
                  f"(n={rows[0].n_baseline}), mean seconds")  # fmt: skip
        t.columns[0].no_wrap, t.columns[0].overflow = False, "fold"
        for c in rows:
            change = f"{100 * c.diff / c.mean_baseline:+.0f}%" if c.mean_baseline else "-"
            p = "-" if math.isnan(c.p_adjusted) else f"{c.p_adjusted:.3f}"
            ci = "-" if math.isnan(c.ci_low) else f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}]"
            t.add_row(c.band, f"{c.mean_baseline:.3f}", f"{c.mean_run:.3f}", f"{c.diff:+.3f}",
                      change, ci, p, "*" if c.marked else "")  # fmt: skip
        console.print(t)
    marked = sum(c.marked for c in changes)
    console.print(
        f"* beyond noise (Holm {ALPHA:.0%}), >= {MIN_RELATIVE:.0%} and >= "
        f"{MIN_ABSOLUTE_S * 1e3:.0f} ms: {marked} of {len(changes)} comparisons marked",
        markup=False, highlight=False,
    )  # fmt: skip
    console.print(f"baseline: {baseline_name}", markup=False, highlight=False)


def _batch_figures(views: Sequence[Any]) -> tuple[float, float, float]:
    """Trajectories per second of batch wall, the mean wall and the mean drain (s)."""
    wall = sum(v.analysis.wall_ns for v in views)
    done = sum(v.analysis.trajectories for v in views)
    drain = sum(v.analysis.drain_ns for v in views)
    rate = done / (wall / 1e9) if wall > 0 else math.nan
    return rate, wall / len(views) / 1e9, drain / len(views) / 1e9


def _change(run: float, base: float) -> str:
    return f"{(run - base) / base:+.0%}" if base > 0 and math.isfinite(run) else "n/a"


def headline(base: Sequence[Any], run: Sequence[Any], width: int = 80) -> str:
    """The answer first, in one line: the run's throughput, mean batch wall and drain,
    each with its change from the baseline's (``base`` and ``run``: the batch views)."""
    if not base or not run:
        which = "either run" if not base and not run else "the baseline" if not base else "the run"
        return f"vs baseline: no batch spans in {which}; the bands per env class below"
    (r_rate, r_wall, r_drain), (b_rate, b_wall, b_drain) = _batch_figures(run), _batch_figures(base)
    rate, wall, drain = _change(r_rate, b_rate), _change(r_wall, b_wall), _change(r_drain, b_drain)
    long = (f"vs baseline: {r_rate:.1f} traj/s ({rate}), batch wall {r_wall:.2f} s ({wall}), "
            f"drain {r_drain:.2f} s ({drain})")  # fmt: skip
    if len(long) <= width:
        return long
    return f"vs baseline: throughput {rate}, batch wall {wall}, drain {drain}"
