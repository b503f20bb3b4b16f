"""The band registry: bands are declared once, and a band added there reaches the
breakdown, its root attributes and the summary's keys without another change."""

from __future__ import annotations

import pickle

import pytest

from otel_rollout import attributes as A
from otel_rollout import summarize
from otel_rollout._bands import DEFAULT_BANDS, Band, BandRegistry
from otel_rollout.accounting import compute_breakdown

MS = 1_000_000
#: One more band, as a maintainer would add it to the registry: between env and env_setup.
JUDGE = Band("judge", 25, "#DD8452", "judge", "judge", "judge")
WITH_JUDGE = DEFAULT_BANDS.with_band(JUDGE)
PHASES = [
    ("env_setup", 0, 10 * MS),
    ("llm", 10 * MS, 40 * MS),
    ("env", 40 * MS, 50 * MS),
    ("judge", 45 * MS, 70 * MS),  # overlaps env: env has the lower priority number
    ("env_teardown", 70 * MS, 75 * MS),
]


def test_the_default_registry_declares_the_five_bands_in_overlap_priority():
    assert DEFAULT_BANDS.names == ("llm", "env", "env_setup", "env_teardown", "other")
    assert DEFAULT_BANDS.phased == A.BANDS and DEFAULT_BANDS.names == A.ALL_BANDS
    assert DEFAULT_BANDS.remainder == A.BAND_OTHER
    assert [DEFAULT_BANDS[n].label for n in DEFAULT_BANDS.names] == [
        "llm", "env", "setup", "tdown", "other",
    ]  # fmt: skip


def test_a_band_added_to_a_registry_is_accounted_in_its_priority():
    b = compute_breakdown(0, 100 * MS, PHASES, registry=WITH_JUDGE)
    assert WITH_JUDGE.names == ("llm", "env", "judge", "env_setup", "env_teardown", "other")
    assert b.bands is WITH_JUDGE
    assert b.nanos == {
        "llm": 30 * MS, "env": 10 * MS, "judge": 20 * MS, "env_setup": 10 * MS,
        "env_teardown": 5 * MS, "other": 25 * MS, "e2e": 100 * MS, "env_queue": 0,
        "finish_session": 0,
    }  # fmt: skip
    assert b.sum_nanos["judge"] == 25 * MS  # the plain sum keeps the overlap
    assert b.band("judge") == 0.02 and list(b.seconds) == list(WITH_JUDGE.names)
    assert sum(b.nanos[n] for n in b.bands.names) == b.nanos["e2e"]
    assert b.as_attributes()["rollout.breakdown.judge"] == 0.02
    assert b.as_attributes()["rollout.breakdown.judge_sum"] == 0.025
    assert [p.phase for p in b.phase_intervals()] == [
        "env_setup", "llm", "env", "judge", "env_teardown",
    ]  # fmt: skip


def test_without_the_band_its_phases_fall_into_other():
    b = compute_breakdown(0, 100 * MS, PHASES)
    assert "judge" not in b.nanos and b.nanos["other"] == 45 * MS


def test_the_summary_has_keys_for_a_band_added_to_the_registry():
    bds = [
        compute_breakdown(0, (100 + i) * MS, PHASES, registry=WITH_JUDGE, trajectory_id=str(i))
        for i in range(3)
    ]
    got = summarize(bds)
    assert got["generate/trajectory_time_judge_mean"] == pytest.approx(0.02)
    assert got["generate/trajectory_time_judge_max"] == pytest.approx(0.02)
    assert len(got) == len(summarize([compute_breakdown(0, MS, PHASES)])) + 3


def test_breakdowns_of_different_registries_do_not_summarize_together():
    a = compute_breakdown(0, 100 * MS, PHASES, registry=WITH_JUDGE)
    b = compute_breakdown(0, 100 * MS, PHASES)
    with pytest.raises(ValueError, match="different bands"):
        summarize([a, b])


def test_a_breakdown_of_a_scoped_registry_pickles_with_it():
    b = compute_breakdown(0, 100 * MS, PHASES, registry=WITH_JUDGE)
    back = pickle.loads(pickle.dumps(b))
    assert back == b and back.bands == WITH_JUDGE and back.band("judge") == 0.02


def test_an_unknown_band_name_is_refused_with_the_bands_listed():
    b = compute_breakdown(0, 100 * MS, PHASES)
    with pytest.raises(ValueError, match="'judge'; expected one of llm, env, env_setup"):
        b.band("judge")


@pytest.mark.parametrize(
    ("bands", "match"),
    [
        ((Band("a", 1, "#000000", "a", "a", "a"),), "exactly one remainder"),
        ((*DEFAULT_BANDS.bands, Band("llm", 5, "#000000", "x", "x", "x")), "repeated: llm"),
        ((*DEFAULT_BANDS.bands, Band("x", 5, "#000000", "x", "llm", "x")), "skyrl_key"),
    ],
)
def test_a_registry_that_cannot_account_is_refused(bands, match):
    with pytest.raises(ValueError, match=match):
        BandRegistry(bands)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"name": "Judge"}, "lower-case"),
        ({"colour": "orange"}, "not '#rrggbb'"),
        ({"label": "judges"}, "1-5 characters"),
    ],
)
def test_a_band_with_a_bad_field_is_refused_naming_it(kwargs, match):
    fields = {"name": "judge", "priority": 25, "colour": "#DD8452", "label": "judge",
              "skyrl_key": "judge", "bound": "judge", **kwargs}  # fmt: skip
    with pytest.raises(ValueError, match=match):
        Band(**fields)


def _printed(fn, data) -> str:
    import io

    from rich.console import Console

    console = Console(width=80, record=True, file=io.StringIO())
    fn(console, data, "run")
    return console.export_text()


def test_the_report_tables_show_a_band_added_to_the_registry():
    pytest.importorskip("rich")
    from otel_rollout.report._aggregate import ReportData
    from otel_rollout.report._tables import headers, print_compact, print_table

    bds = [
        compute_breakdown(0, 100 * MS, PHASES, registry=WITH_JUDGE, env_class="gsm8k",
                          trajectory_id=str(i), trace_id=f"{i:032x}")
        for i in range(4)
    ]  # fmt: skip
    data = ReportData.of(bds)
    assert data.bands is WITH_JUDGE and "judge" in headers(data)
    table = _printed(print_table, data)
    row = next(line for line in table.splitlines() if " judge " in line)
    assert "0.020" in row and "20%" in row  # mean seconds and share of e2e
    compact = _printed(print_compact, data)
    assert "judge" in compact.splitlines()[1] + compact.splitlines()[2]
    assert max(len(line) for line in table.splitlines() + compact.splitlines()) <= 80


def test_every_colour_comes_from_the_registry():
    pytest.importorskip("rich")
    from otel_rollout._export import console_render
    from otel_rollout.live import _screen
    from otel_rollout.report import _pictures, _timeline

    colours = dict(DEFAULT_BANDS.colours)
    assert dict(_pictures.COLORS) == dict(_timeline.COLORS) == dict(_screen._BAND_STYLE)
    assert dict(_pictures.COLORS) == colours
    assert {b.name: b.ansi for b in DEFAULT_BANDS} == console_render._PHASE_COLORS


def test_the_dashboard_draws_each_band_in_its_registry_colour():
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "deploy/grafana/dashboards/rollout.json"
    found = []

    def walk(node):
        if isinstance(node, dict):
            matcher = node.get("matcher", {})
            if matcher.get("id") == "byName" and matcher.get("options") in DEFAULT_BANDS:
                colours = [p["value"]["fixedColor"] for p in node["properties"]]
                found.append((matcher["options"], colours))
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(json.loads(path.read_text()))
    assert found  # the band panels colour their series
    assert all(colours == [DEFAULT_BANDS[name].colour] for name, colours in found), found
