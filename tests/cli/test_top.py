"""``otel-rollout top``: what the live view shows while a configure()d run writes its trace
file (running trajectories, the tail forming) and at its end (the figures of ``report``),
the same fed over OTLP by the real exporters, and a plain line for a bad source."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from _backends import wait_until
from _live_run import GatedRun, configure_file_run
from _otel_env import clean_otel_env

from otel_rollout import attributes as A
from otel_rollout.live import Feed, Ingest, LiveState, Sources, View, render
from otel_rollout.live._command import add_parser
from otel_rollout.report import ReportData, read_sources

textual = pytest.importorskip("textual")


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    clean_otel_env(monkeypatch)


def _feed(*specs: str, **kw) -> Feed:
    return Feed(Ingest(LiveState()), Sources.of(specs), **kw)


def _text(feed: Feed, width: int = 80, height: int = 24) -> str:
    view = View(window_s=3600.0, live=feed.status(), notes=feed.notes())
    group = render(feed.ingest.state, view, width, height, feed.reader_losses())
    return "\n".join(t.plain for t in group.renderables)


def _joined(feed: Feed) -> str:
    """The screen with wrapped lines joined (a long path wraps at 80 columns)."""
    return _text(feed).replace("\n  ", " ")


def _poll_until(feed: Feed, what: str, probe, timeout_s: float = 30.0):
    def step():
        feed.poll(0.5)
        return probe()

    return wait_until(what, step, timeout_s=timeout_s, every_s=0.05)


def _report(folder: Path):
    data = ReportData()
    result = read_sources([str(folder / "*.jsonl")], emit=data.add)
    return result, data


# --- the run as it goes, then its end -----------------------------------------------------------
def test_running_trajectories_appear_the_slots_empty_and_the_end_equals_report(
    tmp_path, monkeypatch
):
    rollout = configure_file_run(tmp_path, monkeypatch)
    run = GatedRun(rollout, 6)
    feed = _feed(str(tmp_path))
    state = feed.ingest.state
    with run.batch(step=1):
        # every trajectory is inside its generate call: listed by the in-flight record
        _poll_until(feed, "six listed by a record",
                    lambda: len([r for r in state.running() if not r.inferred]) == 6)  # fmt: skip
        assert {r.trajectory_id for r in state.running()} == set(run.ids)
        assert {r.phase for r in state.running()} == {A.PHASE_LLM}
        assert state.running_by_env() == {"math": 3, "code": 3}
        text = _text(feed)
        assert "done/running 0/6" in text and "t00" in text and "llm" in text
        # the slots empty: four finish, two run on
        run.release(0, 1, 2, 3)
        _poll_until(feed, "four finished", lambda: state.finished == 4)
        _poll_until(feed, "two running", lambda: {r.trajectory_id for r in state.running()}
                    == {"t04", "t05"})  # fmt: skip
        text = _text(feed)
        assert "4 finished" in text and "2 running" in text
        assert "slots  2 held: 2 generating; so far " in text, text
        assert "t04" in text and "t05" in text and "t00" not in text.split("running")[-1]
    rollout.shutdown()
    _poll_until(feed, "all six", lambda: state.finished == 6 and not state.running())
    _poll_until(feed, "the batch's verdict", lambda: state.batches.verdicts)

    result, data = _report(tmp_path)
    assert result.found == state.finished == 6
    assert dict(state.finished_by_env) == {"math": 3, "code": 3}
    # the bands over the run, in exact nanoseconds, are report's
    n, e2e, bands, _, _ = state.window(3600.0)
    assert n == 6
    traj = []
    read_sources([str(tmp_path / "*.jsonl")], emit=traj.append)
    assert e2e == sum(t.breakdown.nanos["e2e"] for t in traj)
    assert bands == [sum(t.breakdown.nanos[b] for t in traj) for b in A.ALL_BANDS]
    # the batch verdict is report's: the slot account, drain and stragglers, exactly
    (live,) = state.batches.verdicts
    (rep,) = data.batches.analyses(result.batches)
    assert live.step == rep.step == 1
    assert live.analysis.slots == rep.analysis.slots
    text = _text(feed)
    assert "done/running 6/0" in text and "step 1" in text
    assert f"{100 * rep.analysis.slots.frac('empty'):.0f}%" in text.split("step 1")[-1]
    for b in rep.analysis.stragglers[-3:]:
        assert b.trace_id[:8] in text


def test_trajectories_nested_under_their_batch_span_are_each_their_own(tmp_path, monkeypatch):
    rollout = configure_file_run(tmp_path, monkeypatch)
    run = GatedRun(rollout, 4)
    feed = _feed(str(tmp_path))
    state = feed.ingest.state
    with run.batch(step=5, nest=True):  # one trace for the step and its trajectories
        run.release(0, 1)
        _poll_until(feed, "two finished", lambda: state.finished == 2)
        _poll_until(feed, "two running", lambda: {r.trajectory_id for r in state.running()
                    if not r.inferred} == {"t02", "t03"})  # fmt: skip
    rollout.shutdown()
    _poll_until(feed, "the verdict", lambda: state.finished == 4 and state.batches.verdicts)
    traj = []
    result = read_sources([str(tmp_path / "*.jsonl")], emit=traj.append)
    assert result.found == 4 and len({t.breakdown.trace_id for t in traj}) == 1
    _, e2e, bands, _, _ = state.window(3600.0)
    assert e2e == sum(t.breakdown.nanos["e2e"] for t in traj)
    assert bands == [sum(t.breakdown.nanos[b] for t in traj) for b in A.ALL_BANDS]
    assert feed.reader_losses() == {}
    (live,) = state.batches.verdicts
    assert live.analysis.trajectories == 4
    # two finished early, two run on: the drain starts at the first of those two ends
    from otel_rollout import analyze_batch

    (span,) = result.batches.values()
    rep = analyze_batch([t.breakdown for t in traj], start_ns=span.start_ns)
    assert live.analysis.slots == rep.slots and live.analysis.drain_ns > 0


def test_writer_without_records_still_shows_running_trajectories_inferred(tmp_path, monkeypatch):
    import otel_rollout

    # records off: the env_setup phases that ended say which trajectories are running
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    r = otel_rollout.configure(local=True, output_dir=tmp_path, traces_exporter="file")
    monkeypatch.setenv("OTEL_ROLLOUT_IN_FLIGHT_INTERVAL_S", "0")
    r2 = otel_rollout.configure(local=True, output_dir=tmp_path / "off")
    r.shutdown()
    assert r.settings.in_flight_interval_s == 1.0  # the default with the trace file
    assert r2.settings.in_flight_interval_s == 0
    run = GatedRun(r2, 3)
    feed = _feed(str(tmp_path / "off"))
    state = feed.ingest.state

    def inferred():
        rows = state.running()
        return rows if len(rows) == 3 and all(x.inferred for x in rows) else None

    with run.batch(step=0):
        rows = _poll_until(feed, "three inferred", inferred)
        assert {x.phase for x in rows} == {"after env_setup"}
        assert "(inferred)" in _text(feed)
    r2.shutdown()
    _poll_until(feed, "all finished", lambda: state.finished == 3)
    assert state.running() == []


# --- the terminal app, driven by textual's pilot ---------------------------------------------
def test_app_shows_the_run_at_80x24_and_its_keys_work(tmp_path, monkeypatch):
    from otel_rollout.live._app import TopApp, TreeScreen

    rollout = configure_file_run(tmp_path, monkeypatch)
    run = GatedRun(rollout, 4)
    app = TopApp(_feed(str(tmp_path)), View(window_s=3600.0), refresh_s=0.1)

    async def until(pilot, probe, what):
        for _ in range(300):
            await pilot.pause(0.05)
            if probe():
                return
        raise AssertionError(f"{what}: screen was\n{app.screen_text()}")

    async def drive():
        async with app.run_test(size=(80, 24)) as pilot:
            with run.batch(step=3):
                await until(pilot, lambda: "done/running 0/4" in app.screen_text(), "running")
                run.release(0, 1, 2)
                await until(pilot, lambda: "3 finished" in app.screen_text(), "tail")
                shown = app.screen_text()
                assert "t03" in shown and "1 running" in shown
                assert all(len(line) <= 80 for line in shown.splitlines())
                await pilot.press("p")
                assert app.view.paused and "paused" in app.screen_text()
                await pilot.press("p", "s")
                assert app.view.sort == "phase"
                await pilot.press("f")
                assert app.view.env in ("code", "math")
                await pilot.press("f", "f")
                assert app.view.env is None
                await pilot.press("enter")  # the selected running trajectory's tree
                assert isinstance(app.screen, TreeScreen)
                await pilot.press("escape")
            rollout.shutdown()
            await until(pilot, lambda: "done/running 4/0" in app.screen_text(), "end")
            await until(pilot, lambda: "step 3" in app.screen_text(), "verdict")
            await pilot.resize_terminal(100, 30)
            await pilot.pause(0.2)
            assert any(len(line) > 80 for line in app.screen_text().splitlines())
            await pilot.press("w")
            assert "process" in app.screen_text()
            await pilot.press("q")

    asyncio.run(drive())


def test_selected_stragglers_tree_is_the_console_renderers_with_a_jaeger_link(
    tmp_path, monkeypatch
):
    from otel_rollout.live._app import jaeger_url, tree_text
    from otel_rollout.live._screen import selectable

    rollout = configure_file_run(tmp_path, monkeypatch)
    run = GatedRun(rollout, 3)
    opened = time.monotonic()
    with run.batch(step=0):
        run.release(0, 1)
        run.started[2].wait(30)
        for th in run._threads[:2]:
            th.join(30)
        longest = time.monotonic() - opened  # t00's and t01's lengths are within it
        # t02 held in its generate call for over twice the others' length, however slow
        # the machine made them
        time.sleep(max(0.2, 3 * longest))
    rollout.shutdown()
    feed = _feed(str(tmp_path))
    _poll_until(feed, "verdict", lambda: feed.ingest.state.batches.verdicts)
    items = selectable(feed.ingest.state, View())
    trace_id, trajectory_id = items[0]  # the straggler
    assert trajectory_id == "t02"
    text = tree_text(feed.ingest.state, trace_id, trajectory_id=trajectory_id)
    assert f"trace {trace_id}" in text and "[llm]" in text and "breakdown" in text
    assert jaeger_url(trace_id, "http://j:16686/") == f"http://j:16686/trace/{trace_id}"


# --- OTLP, through --listen ----------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ["grpc", "http/protobuf"])
def test_listen_receives_a_run_from_the_real_otlp_exporter(monkeypatch, protocol):
    import socket

    import otel_rollout
    from otel_rollout.live._listen import Listener

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    listener = Listener("127.0.0.1", port).start()
    assert listener.error is None, listener.error
    try:
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        monkeypatch.setenv("OTEL_BLRP_SCHEDULE_DELAY", "50")
        monkeypatch.setenv("OTEL_ROLLOUT_IN_FLIGHT_INTERVAL_S", "0.1")
        url = f"http://127.0.0.1:{port if protocol == 'grpc' else port + 1}"
        online = []
        rollout = otel_rollout.configure(
            local=True, endpoint=url, protocol=protocol, service_name="otlp",
            on_breakdown=online.append,
        )  # fmt: skip
        run = GatedRun(rollout, 4)
        feed = Feed(Ingest(LiveState()), None, listener)
        state = feed.ingest.state
        with run.batch(step=7):
            _poll_until(feed, "running over OTLP", lambda: len(
                [r for r in state.running() if not r.inferred]) == 4)  # fmt: skip
            run.release(0)
            _poll_until(feed, "one finished", lambda: state.finished == 1)
        rollout.shutdown()
        _poll_until(feed, "all", lambda: state.finished == 4 and state.batches.verdicts)
        # the same breakdowns as the online processor's, in exact nanoseconds
        _, e2e, bands, _, _ = state.window(3600.0)
        assert e2e == sum(b.nanos["e2e"] for b in online)
        assert bands == [sum(b.nanos[k] for b in online) for k in A.ALL_BANDS]
        assert "listening: OTLP gRPC" in _text(feed) and state.running() == []
    finally:
        listener.stop()


# --- sources -------------------------------------------------------------------------------------
def test_a_folder_shows_its_newest_run_and_files_that_appear_later(tmp_path, monkeypatch):
    import os

    old = configure_file_run(tmp_path, monkeypatch, run_id="old-run")
    with old.tracer.trajectory("a", env="x"):
        pass
    old.shutdown()
    os.utime(old.trace_file, (1, 1))
    new = configure_file_run(tmp_path, monkeypatch, run_id="new-run")
    with new.tracer.trajectory("b", env="x"):
        pass
    new.force_flush()
    feed = _feed(str(tmp_path))
    _poll_until(feed, "new run", lambda: feed.ingest.state.finished == 1)
    assert feed.sources.run == "new-run"
    # a second process of the run writes a file of its own: read with the first
    other = configure_file_run(tmp_path, monkeypatch, run_id="new-run")
    with other.tracer.trajectory("c", env="y"):
        pass
    other.shutdown()
    new.shutdown()
    _poll_until(feed, "both processes", lambda: feed.ingest.state.finished == 2)
    assert len(feed.ingest.state.processes) == 2
    assert "2 processes" in _text(feed)


def test_a_file_is_read_incrementally_and_follows_its_rotations(tmp_path):
    from otel_rollout.live._sources import FileTail

    f = tmp_path / "traces-x.jsonl"
    f.write_bytes(b'{"a": 1}\n{"b"')
    tail = FileTail(f)
    assert tail.read(1 << 20) == [b'{"a": 1}']
    with f.open("ab") as out:
        out.write(b": 2}\n")
    assert tail.read(1 << 20) == [b'{"b": 2}']
    assert tail.read(1 << 20) == []
    assert tail.offset == f.stat().st_size
    (tmp_path / "traces-x_0001.jsonl").write_text("{}\n")
    sources = Sources.of([str(f)])
    assert [t.path.name for t in sources.discover()] == ["traces-x.jsonl", "traces-x_0001.jsonl"]


def test_missing_non_trace_and_quiet_sources_get_a_line_on_screen(tmp_path):
    feed = _feed(str(tmp_path / "nope.jsonl"))
    feed.poll(0.1)
    assert "nope.jsonl: no such file or folder (waiting for it)" in _joined(feed)
    junk = tmp_path / "notes.jsonl"
    junk.write_text("hello\nworld\n")
    feed = _feed(str(junk))
    feed.poll(0.1)
    assert "notes.jsonl: not a trace file (2 lines" in _joined(feed)
    obj = tmp_path / "obj.jsonl"
    obj.write_text(json.dumps({"some": "json"}) + "\n")
    feed = _feed(str(obj))
    feed.poll(0.1)
    assert "not a trace file" in _joined(feed) and "no resourceSpans" in _joined(feed)
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"resourceSpans": []}) + "\n")
    feed = _feed(str(good), stale_s=0.0)
    feed.poll(0.1)
    assert "no new data for" in _joined(feed) and "stale" in _text(feed)


def test_cli_once_prints_one_screen_and_never_a_traceback(tmp_path, monkeypatch, capsys):
    from otel_rollout.cli import main

    rollout = configure_file_run(tmp_path, monkeypatch)
    with (
        rollout.tracer.batch(step=0),
        rollout.tracer.trajectory("only", env="x") as t,
        t.generate(),
    ):
        pass
    rollout.shutdown()
    assert main(["top", "--once", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "done/running 1/0" in out and "step 0" in out
    assert main(["top", "--once", str(tmp_path / "missing")]) == 0
    out = capsys.readouterr()
    assert "missing: no such file or folder" in out.out.replace("\n  ", " ")
    assert "Traceback" not in out.err
    with pytest.raises(SystemExit):
        main(["top", "--listen", "notaport"])
    assert "expected [HOST:]PORT" in capsys.readouterr().err


def test_top_parser_is_registered():
    import argparse

    sub = argparse.ArgumentParser().add_subparsers()
    add_parser(sub, lambda s: s, lambda *m: None)
    assert "top" in sub.choices


def test_export_health_shows_the_writers_losses_by_reason(tmp_path):
    from otel_rollout._export.tracefile import loss_record

    f = tmp_path / "traces-x.jsonl"
    ids = {"rollout.export.writer.id": "w1", "rollout.run.id": "r"}
    f.write_bytes(loss_record(ids, {"queue_full": 5}) + loss_record(ids, {"queue_full": 12,
                  "export_failed": 3}))  # fmt: skip
    feed = _feed(str(f))
    feed.poll(0.5)
    assert "export  dropped export_failed 3, queue_full 12" in _text(feed)


def test_listen_takes_otlp_http_json_and_ignores_metrics(tmp_path, monkeypatch):
    import socket
    import urllib.request

    from otel_rollout.live._listen import Listener

    rollout = configure_file_run(tmp_path, monkeypatch)
    with rollout.tracer.trajectory("j", env="x") as t, t.generate():
        pass
    rollout.shutdown()
    lines = [x for x in rollout.trace_file.read_text().splitlines() if '"j"' in x]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    listener = Listener("127.0.0.1", port).start()
    try:
        base = f"http://127.0.0.1:{port + 1}"
        for path, body in (("/v1/metrics", b"{}"), ("/v1/traces", lines[0].encode())):
            req = urllib.request.Request(base + path, data=body, method="POST",
                                         headers={"Content-Type": "application/json"})  # fmt: skip
            with urllib.request.urlopen(req, timeout=10) as resp:
                assert resp.status == 200
        feed = Feed(Ingest(LiveState()), None, listener)
        feed.poll(0.5)
        assert feed.ingest.state.finished == 1 and listener.received == 1
    finally:
        listener.stop()


def test_a_newer_run_starting_in_the_folder_is_followed_and_the_screen_says_so(
    tmp_path, monkeypatch
):
    old = configure_file_run(tmp_path, monkeypatch, run_id="old-run")
    with old.tracer.trajectory("a", env="x"):
        pass
    old.force_flush()
    feed = _feed(str(tmp_path))
    state = feed.ingest.state
    _poll_until(feed, "the old run", lambda: state.finished == 1)
    assert feed.sources.run == "old-run" and "following run" not in _text(feed)
    new = configure_file_run(tmp_path, monkeypatch, run_id="new-run")
    for name in ("b", "c"):
        with new.tracer.trajectory(name, env="y"):
            pass
    new.force_flush()
    with old.tracer.trajectory("late", env="x"):  # the old run goes on writing
        pass
    old.shutdown()
    _poll_until(feed, "the new run", lambda: state.finished == 2)
    new.shutdown()
    assert feed.sources.run == "new-run"
    assert dict(state.finished_by_env) == {"y": 2}  # the old run's figures are gone
    assert "following run new-run, newer than run old-run" in _joined(feed)


def test_a_run_named_with_run_is_kept_when_a_newer_one_starts(tmp_path, monkeypatch):
    old = configure_file_run(tmp_path, monkeypatch, run_id="old-run")
    with old.tracer.trajectory("a", env="x"):
        pass
    old.force_flush()
    feed = Feed(Ingest(LiveState()), Sources.of([str(tmp_path)], run="old-run"))
    _poll_until(feed, "the old run", lambda: feed.ingest.state.finished == 1)
    new = configure_file_run(tmp_path, monkeypatch, run_id="new-run")
    with new.tracer.trajectory("b", env="y"):
        pass
    new.shutdown()
    old.shutdown()
    feed.poll(0.5)
    assert feed.sources.run == "old-run" and feed.ingest.state.finished == 1


def test_a_running_row_keeps_the_ids_index_and_names_no_phase():
    from otel_rollout.live._screen import NO_PHASE, _age_row
    from otel_rollout.live._state import Running

    r = Running("ab" * 16, "gsm8k_multi_turn-45", "gsm8k_multi_turn", "", 0, "", 0, "p")
    row = _age_row(r, 3_000_000_000, "  ", 80).plain
    assert row.startswith("  gsm8k_mu…turn-45 ") and " gsm8k…turn " in row
    assert NO_PHASE in row and " - " not in row
