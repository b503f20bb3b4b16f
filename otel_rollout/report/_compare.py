"""``report RUN --baseline OTHER_RUN``: per env class and band, both runs' mean and p90, the
difference of means and a seeded bootstrap 95% interval for it, so a change beyond noise
is marked as such."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from otel_rollout._accounting.summary import SUMMARY_FIELDS
from otel_rollout.report._aggregate import ReportData

#: Bootstrap resamples and seed: the interval is the same on every run of the report.
RESAMPLES = 2000
SEED = 0
#: Index draws held at once while resampling (bounds memory for large runs).
_BLOCK = 4_000_000


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

    @property
    def beyond_noise(self) -> bool:
        """Whether the 95% interval of the difference excludes zero."""
        return self.ci_low > 0 or self.ci_high < 0


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


def compare(
    baseline: ReportData, run: ReportData, *, resamples: int = RESAMPLES, seed: int = SEED
) -> list[BandChange]:
    """Every band of every env class present in both runs."""
    base = {name: cols for name, _, cols in baseline.groups()}
    out = []
    for name, _, cols in run.groups():
        if name not in base:
            continue
        for band in SUMMARY_FIELDS:
            x, y = base[name][band], cols[band]
            if not len(x) or not len(y) or not (x.any() or y.any()):
                continue  # a band neither run used
            low, high = bootstrap_diff(x, y, resamples=resamples, seed=seed)
            out.append(BandChange(
                name, band, len(x), len(y), float(np.mean(x)), float(np.mean(y)),
                float(np.percentile(x, 90)), float(np.percentile(y, 90)),
                float(np.mean(y) - np.mean(x)), low, high,
            ))  # fmt: skip
    return out


def changes_json(changes: list[BandChange]) -> list[dict[str, Any]]:
    return [{**asdict(c), "beyond_noise": c.beyond_noise} for c in changes]


def print_changes(console: Any, changes: list[BandChange], baseline_name: str) -> None:
    """A table per env class (80 columns): means, p90s, difference and its interval."""
    from rich import box
    from rich.table import Table

    if not changes:
        console.print("no env class is in both runs: nothing to compare")
        return
    for env_class in dict.fromkeys(c.env_class for c in changes):
        rows = [c for c in changes if c.env_class == env_class]
        t = Table(
            title=f"{env_class}: run (n={rows[0].n_run}) against baseline "
            f"(n={rows[0].n_baseline}), mean seconds; * beyond noise",
            box=box.SIMPLE_HEAD, padding=(0, 1), title_justify="left",
        )  # fmt: skip
        t.add_column("band", no_wrap=True)
        for h in ("base", "run", "diff", "95% CI of diff", "p90 base", "p90 run", ""):
            t.add_column(h, justify="right", no_wrap=True)
        for c in rows:
            t.add_row(c.band, f"{c.mean_baseline:.3f}", f"{c.mean_run:.3f}", f"{c.diff:+.3f}",
                      f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}]", f"{c.p90_baseline:.3f}",
                      f"{c.p90_run:.3f}", "*" if c.beyond_noise else "")  # fmt: skip
        console.print(t)
    console.print(f"baseline: {baseline_name}")
