"""Draw docs/images/slots-{a..e}.png: the slot account's closed-form cases of
docs/batch.md (the same batches as tests/accounting/test_slots.py).

    python scripts/draw_slot_cases.py
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from otel_rollout._accounting.slots import PARTS, slot_account
from otel_rollout.accounting import compute_breakdown
from otel_rollout.report._timeline import PART_COLORS

U = 1_000_000_000
OUT = Path(__file__).resolve().parent.parent / "docs" / "images"


def traj(tid, start, end, *phases):
    return compute_breakdown(start * U, end * U, [(p, s * U, e * U) for p, s, e in phases],
                             trajectory_id=tid)  # fmt: skip


def work(tid, start, length):
    gen = start + length * 6 // 10
    return traj(tid, start, start + length, ("llm", start, gen), ("env", gen, start + length))


CASES = {
    "a": ([work(f"t{i}", 0, 10) for i in range(3)] + [work("long", 0, 40)], 4),
    "b": ([work(f"t{w}{i}", 10 * w, 10) for w in range(4) for i in range(4)], 4),
    "c": ([work(f"t{k:02}", 10 * (k // 4), 10) for k in range(15)] + [work("long", 30, 40)], 4),
    "d": ([traj("a", 0, 10, ("llm", 0, 10)), traj("b", 0, 20, ("llm", 0, 5), ("env", 5, 20)),
           traj("c", 0, 30, ("env", 0, 30))], 2),
    "e": ([traj("t0", 0, 12, ("llm", 0, 2), ("env", 2, 10), ("llm", 9, 12)),
           traj("t1", 0, 13, ("env_setup", 0, 1), ("llm", 1, 3), ("env", 3, 11),
                ("env_teardown", 11, 12))], 2),
}  # fmt: skip


def draw(name, bds, capacity):
    a = slot_account(bds, capacity=capacity)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(5, 2.6), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 2]})  # fmt: skip
    order = sorted(bds, key=lambda b: (b.end_time_ns, b.trajectory_id))
    for row, b in enumerate(order):
        y = (row - 0.4, 0.8)
        ax.broken_barh([(b.start_time_ns / U, b.e2e)], y, color=PART_COLORS["other"])
        for p in sorted(b.phase_intervals(), key=lambda p: -PARTS.index(p.phase)):
            ax.broken_barh([(p.start_ns / U, (p.end_ns - p.start_ns) / U)], y,
                           color=PART_COLORS[p.phase])  # fmt: skip
    for axis in (ax, ax2):
        axis.axvspan(a.drain_start_ns / U, a.end_ns / U, color="#999999", alpha=0.25, lw=0)
    ax.set_ylim(len(order) - 0.5, -0.5)
    ax.set_yticks([])
    ax.set_title(f"({name}) C = {a.capacity}: " + ", ".join(
        f"{p} {v // U}" for p, v in a.slot_ns.items() if v) + f"; drain {a.drain_ns // U} s",
        fontsize=8)  # fmt: skip
    tl = a.timeline
    ax2.stackplot(tl.times_ns / U, *(tl.column(p) for p in PARTS),
                  colors=[PART_COLORS[p] for p in PARTS], step="post", lw=0)  # fmt: skip
    over = tl.column("overflow")
    if over.any():
        beyond = np.where(over > 0, a.capacity + over, np.nan)
        ax2.step(tl.times_ns / U, beyond, where="post", color="black", lw=0.8)
    ax2.set_ylim(0, a.capacity + int(over.max()))
    ax2.set_ylabel("slots", fontsize=8)
    ax2.set_xlabel("seconds", fontsize=8)
    ax2.tick_params(labelsize=7)
    fig.tight_layout(pad=0.3)
    fig.savefig(OUT / f"slots-{name}.png", dpi=80)
    plt.close(fig)


if __name__ == "__main__":
    for name, (bds, capacity) in CASES.items():
        draw(name, bds, capacity)
