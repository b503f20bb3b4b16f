"""``otel-rollout top`` shows the training step open in the run: the phase it is in and
for how long (a hung step is a phase whose time only grows), between phases too, and
nothing once the step ended."""

from __future__ import annotations

import re

import pytest
from _backends import wait_until
from _live_run import configure_file_run
from _otel_env import clean_otel_env

from otel_rollout.live import Feed, Ingest, LiveState, Sources, View, render

textual = pytest.importorskip("textual")


@pytest.fixture(autouse=True)
def _clean(monkeypatch):
    clean_otel_env(monkeypatch)


def _text(feed: Feed) -> str:
    view = View(window_s=3600.0, live=feed.status(), notes=feed.notes())
    group = render(feed.ingest.state, view, 80, 24, feed.reader_losses())
    return "\n".join(t.plain for t in group.renderables)


def _poll_until(feed: Feed, what: str, probe):
    def once():
        feed.poll(0.5)
        return probe()

    return wait_until(what, once, timeout_s=30.0, every_s=0.05)


def _step_line(feed: Feed) -> str | None:
    lines = [x for x in _text(feed).splitlines() if x.startswith("step ")]
    return lines[0] if lines else None


def test_top_shows_the_step_s_phase_and_how_long_it_has_been_in_it(tmp_path, monkeypatch):
    rollout = configure_file_run(tmp_path, monkeypatch)
    feed = Feed(Ingest(LiveState()), Sources.of([str(tmp_path)]))
    try:
        with rollout.tracer.step(12, trainer="ppo") as step:
            with step.phase("run_training"):
                line = _poll_until(
                    feed,
                    "the phase on screen",
                    lambda: (x := _step_line(feed)) and "run_training" in x and x,
                )
                assert re.fullmatch(r"step 12: run_training for \S+  \(step \S+\)", line), line
                assert len(line) <= 80
            _poll_until(feed, "between phases",
                        lambda: "between phases" in (_step_line(feed) or ""))  # fmt: skip
        _poll_until(feed, "no step once it ended", lambda: _step_line(feed) is None)
    finally:
        rollout.shutdown()
