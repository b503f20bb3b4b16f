"""The report's tables at 80 columns: no id folded across rows, none cut at its end, no
number cut."""

from __future__ import annotations

import io

import pytest

pytest.importorskip("rich")

from otel_rollout._base.text import mid
from otel_rollout.accounting import compute_breakdown
from otel_rollout.report._aggregate import ReportData

MS = 1_000_000
LONG_ENV = "gsm8k_multi_turn_with_a_very_long_env_class_name"


def _data():
    bds = []
    for i in range(12):
        env = LONG_ENV if i % 2 else "lcb"
        phases = [("llm", 0, (40 + i) * MS), ("env", (40 + i) * MS, (90 + 3 * i) * MS)]
        bds.append(compute_breakdown(0, (100 + 3 * i) * MS, phases, env_class=env,
                                     trajectory_id=f"{env}-{i + 40}", trace_id=f"{i + 1:032x}",
                                     attributes={"rollout.loop.own": 0.0}))  # fmt: skip
    return ReportData.of(bds)


def _printed(fn, *args) -> list[str]:
    from rich.console import Console

    console = Console(width=80, record=True, file=io.StringIO())
    fn(console, *args)
    return console.export_text().splitlines()


def test_mid_keeps_the_start_and_the_index():
    assert mid("gsm8k_multi_turn-45", 15) == "gsm8k_m…turn-45"
    assert mid("lcb-3", 15) == "lcb-3"


def test_slowest_rows_stay_on_one_line_with_their_index_and_whole_trace_id():
    from otel_rollout.report._tables import print_slowest

    lines = _printed(print_slowest, _data())
    assert max(len(line) for line in lines) <= 80
    rows = [line for line in lines if "00000000000000000000" in line]
    assert len(rows) == 5 and len([ln for ln in lines if ln.strip()]) == 3 + 5  # no fold
    for row in (r for r in rows if "gsm8" in r):
        trajectory, env = row.split()[:2]
        assert "…" in trajectory and trajectory.rsplit("-", 1)[1].isdigit()  # index kept
        assert env.startswith("gsm8") and env.endswith("name")
        assert any(f"{i:032x}" in row for i in range(1, 13))  # the whole trace id
        assert row.split()[2].count(".") == 1 and len(row.split()[2]) == 5  # e2e whole


def test_per_class_tables_shorten_a_long_env_class_in_its_middle():
    from otel_rollout.report._tables import print_compact, print_table

    data = _data()
    for lines in (_printed(print_compact, data, "run"), _printed(print_table, data, "run")):
        assert max(len(line) for line in lines) <= 80
        named = [line for line in lines if "gsm8k" in line]
        assert len(named) == 1 and "…" in named[0] and "name" in named[0]
        assert not any(line.strip().startswith("_") for line in lines)  # no folded remainder


def test_the_batches_overview_keeps_a_long_batch_id_on_one_row():
    from otel_rollout.report._batches import print_batches_overview

    long_id = "trainer-run-2026-12-06-node-17-rollout-batch-000123"
    bds = [compute_breakdown(i * MS, (50 + i) * MS, [("llm", i * MS, (40 + i) * MS)],
                             env_class="lcb", trajectory_id=f"lcb-{i}", trace_id=f"{i + 1:032x}",
                             batch_id=long_id) for i in range(6)]  # fmt: skip
    data = ReportData.of(bds)
    lines = _printed(print_batches_overview, data.batches.analyses({}))
    assert max(len(line) for line in lines) <= 80
    (row,) = [line for line in lines if "trainer" in line]
    assert "…" in row and "000123" in row  # the end of the id stays, on one row
