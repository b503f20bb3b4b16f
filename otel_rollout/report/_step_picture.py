"""The step picture: the steps' phases, the generation slots of their batches, the
generation buffer's depth and GPU utilisation (where they were sampled) on one time axis,
as a PNG (matplotlib, Agg)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from otel_rollout import attributes as A
from otel_rollout._accounting.breakdown import Breakdown
from otel_rollout._accounting.slots import EMPTY, PARTS, slot_account
from otel_rollout._bands import DEFAULT_BANDS
from otel_rollout.report._steps import StepView

#: Steps drawn: the latest ones (a long run's whole history would be unreadable).
MAX_STEPS_DRAWN = 20
#: The parts that are not the trainer's phases, and the colours of the phases, in turn.
FIXED_COLOURS = {A.STEP_PART_GENERATION: "#8FAADC", A.STEP_PART_OTHER: "#DDDDDD"}
PHASE_COLOURS = ("#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3",
                 "#8C8C8C", "#CCB974", "#64B5CD")  # fmt: skip
EMPTY_COLOUR = "#F2F2F2"


def part_colours(views: Sequence[StepView]) -> dict[str, str]:
    """A colour per part: generation and other fixed, phases in order of first start."""
    out = dict(FIXED_COLOURS)
    for v in views:
        for part in v.account.phases:
            if part not in out:
                out[part] = PHASE_COLOURS[(len(out) - len(FIXED_COLOURS)) % len(PHASE_COLOURS)]
    return out


def _slot_rows(views: Sequence[StepView], breakdowns_of: Mapping[str, Sequence[Breakdown]]):
    """Per batch of the steps drawn (once each): its slot timeline."""
    seen: set[str] = set()
    for v in views:
        for bid, start, _ in v.batches:
            bds = breakdowns_of.get(bid)
            if bid in seen or not bds:
                continue
            seen.add(bid)
            yield slot_account(bds, start_ns=start).timeline


def draw_steps_png(
    views: Sequence[StepView],
    breakdowns_of: Mapping[str, Sequence[Breakdown]],
    path: Path,
) -> Path:
    """Draw the latest :data:`MAX_STEPS_DRAWN` steps; rows without data are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    views = sorted(views, key=lambda v: v.account.start_ns)[-MAX_STEPS_DRAWN:]
    t0 = views[0].account.start_ns
    colours = part_colours(views)
    slots = list(_slot_rows(views, breakdowns_of))
    depth = [p for v in views for p in v.series.get(A.SERIES_BUFFER_DEPTH, ())]
    gpu = [p for v in views for p in v.series.get(A.SERIES_GPU_UTILIZATION, ())]
    rows = ["phases", *(["slots"] if slots else []), *(["buffer"] if depth else []),
            *(["gpu"] if gpu else [])]  # fmt: skip
    heights = [1.0 if r == "phases" else 1.6 for r in rows]
    fig, axes = plt.subplots(len(rows), 1, sharex=True, squeeze=False,
                             figsize=(11, 1.2 + 1.3 * sum(heights)),
                             gridspec_kw={"height_ratios": heights})  # fmt: skip
    ax_of = dict(zip(rows, axes[:, 0], strict=True))

    ax = ax_of["phases"]
    for v in views:
        a = v.account
        for seg in a.timeline:
            ax.broken_barh([((seg.start_ns - t0) / 1e9, (seg.end_ns - seg.start_ns) / 1e9)],
                           (0, 1), color=colours[seg.part], lw=0)  # fmt: skip
        label = f"step {a.step}" if a.step is not None else "step"
        ax.text((a.start_ns - t0) / 1e9, 1.08, label, fontsize=8, va="bottom")
        ax.axvline((a.start_ns - t0) / 1e9, color="black", lw=0.6)
    ax.set_ylim(0, 1.4)
    ax.set_yticks([])
    ax.set_ylabel("step")
    ax.legend(handles=[Patch(color=c, label=p) for p, c in colours.items()], fontsize=8,
              loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)  # fmt: skip

    if slots:
        ax = ax_of["slots"]
        for tl in slots:
            x = (tl.times_ns - t0) / 1e9
            base = np.zeros(len(x))
            for part in PARTS:
                top = base + tl.column(part)
                colour = EMPTY_COLOUR if part == EMPTY else DEFAULT_BANDS[part].colour
                ax.fill_between(x, base, top, step="post", color=colour, lw=0)
                base = top
        handles = [Patch(color=EMPTY_COLOUR if p == EMPTY else DEFAULT_BANDS[p].colour,
                         label=p) for p in PARTS]  # fmt: skip
        ax.legend(handles=handles, fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0),
                  frameon=False)  # fmt: skip
        ax.set_ylabel("generation\nslots")
    if depth:
        ax = ax_of["buffer"]
        depth.sort()
        ax.step([(t - t0) / 1e9 for t, _ in depth], [d for _, d in depth], where="post",
                color="#333333")  # fmt: skip
        ax.set_ylabel("buffer\ndepth")
        ax.set_ylim(bottom=0)
    if gpu:
        ax = ax_of["gpu"]
        gpu.sort()
        ax.plot([(t - t0) / 1e9 for t, _ in gpu], [100 * u for _, u in gpu], color="#2CA02C")
        ax.set_ylabel("GPU util %")
        ax.set_ylim(0, 100)
    axes[-1, 0].set_xlabel("seconds since the first step drawn started")
    fig.suptitle(f"steps: phases, generation slots{', buffer depth' if depth else ''}"
                 f"{', GPU utilisation' if gpu else ''}", fontsize=10)  # fmt: skip
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_step_picture(
    views: Sequence[StepView], breakdowns_of: Mapping[str, Sequence[Breakdown]], out_dir: Any
) -> Path | None:
    """``out_dir/steps.png`` when there are steps, else None."""
    if not views:
        return None
    return draw_steps_png(views, breakdowns_of, Path(out_dir) / "steps.png")
