"""``otel-rollout report --jobs N``: rotated files read by several processes give the
sequential read's figures to the nanosecond, in its order, whatever straddles a rotation."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
from _otlp_lines import line as _line
from _otlp_lines import span as _span

from otel_rollout import attributes as A
from otel_rollout._export.in_flight import SPAN_NAME as IN_FLIGHT_SPAN
from otel_rollout.cli import main
from otel_rollout.report import _parallel
from otel_rollout.report._model import TraceReadError
from otel_rollout.report._parallel import read_sources_parallel
from otel_rollout.report._sources import read_sources

T0 = 1_700_000_000_000_000_000


def _trajectory(rng: random.Random, trace: int, start: int, root: int = 0) -> list[dict]:
    """Phase spans, then the root (now and then a phase that ends after it)."""
    root, t, out = root or trace * 1000, start, []
    for i in range(rng.randint(1, 6)):
        phase = rng.choice(("llm", "env", "env_setup"))
        d = rng.randint(1, 10_000)
        out.append(_span(trace, root + i + 1, root, phase, t, t + d, **{A.PHASE: phase}))
        t += d + rng.randint(0, 500)
    attrs = {A.TRAJECTORY_ID: f"t{trace}", A.ENV_CLASS: rng.choice(("gsm8k", "swe")),
             A.GEN_AI_REQUEST_MODEL: "m", A.BATCH_ID: f"b{trace // 40}"}  # fmt: skip
    out.append(_span(trace, root, None, "trajectory", start, t, **attrs))
    if rng.random() < 0.1:  # a span that ends after its root, written after it
        out.append(_span(trace, root + 99, root, "llm", t - 5, t + 50, **{A.PHASE: "llm"}))
    return out


def _lines(seed: int, n: int = 400) -> list[str]:
    """Trace-file lines as an exporter writes them: several trajectories at once, spans as
    they end, in batches; with the odd things a real file holds."""
    rng = random.Random(seed)
    active: list[list[dict]] = []
    spans: list[dict] = []
    nxt = 1
    while nxt <= n or active:
        while nxt <= n and len(active) < 6:
            active.append(_trajectory(rng, nxt, T0 + nxt * 1000))
            nxt += 1
        i = rng.randrange(len(active))
        spans.append(active[i].pop(0))
        if not active[i]:
            active.pop(i)
    lines, i = [], 0
    while i < len(spans):
        k = rng.randint(1, 7)
        lines.append(_line(spans[i : i + k]))
        if rng.random() < 0.02:
            lines.append(lines[-1])  # a line written twice
        i += k
    # a batch span, traces of another service, a trajectory without a root, a trace with
    # two roots, an inverted root, a span without a start, an in-flight record, a bad line
    batch = _span(5000, 1, None, "batch", T0, T0 + 10**6, **{A.BATCH_ID: "b1", A.STEP: 3})
    other = _span(5001, 1, None, "GET /", T0, T0 + 5)
    orphan = [_span(5002, 2, 1, "llm", T0 + j, T0 + j + 1, **{A.PHASE: "llm"}) for j in (0, 9)]
    two = _trajectory(rng, 5003, T0) + _trajectory(rng, 5003, T0 + 7, root=7000)
    inverted = _span(5004, 1, None, "trajectory", T0 + 9, T0, **{A.TRAJECTORY_ID: "x"})
    no_start = _span(5005, 1, None, "llm", None, T0, **{A.PHASE: "llm"})
    flight = _span(5006, 1, None, IN_FLIGHT_SPAN, T0, T0 + 1)
    extras = [[batch], [other], orphan[:1], orphan[1:], [inverted],
              [no_start], [flight], [batch]]  # fmt: skip
    for spans_ in extras:
        lines.insert(rng.randrange(len(lines)), _line(spans_, "other" if spans_ == [other]
                                                        else "svc"))  # fmt: skip
    lines.insert(rng.randrange(len(lines)), '{"resourceSpans": [{"sco')
    at = rng.randrange(len(lines))  # the second root within the window of the first
    lines[at:at] = [_line(two[:3]), lines[at], _line(two[3:])]
    return lines


def _rotate(tmp_path, lines: list[str], parts: int, seed: int) -> list[str]:
    """The lines cut into ``parts`` rotated files at random lines."""
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(lines)), parts - 1))
    files = []
    for k, (a, b) in enumerate(zip([0, *cuts], [*cuts, len(lines)], strict=True)):
        f = tmp_path / f"traces-x_{k:04d}.jsonl"
        f.write_text("".join(line + "\n" for line in lines[a:b]))
        files.append(str(f))
    return files


def _as_tuple(result, emitted):
    trajectories = [(t.breakdown, t.phases, t.service, t.run_id, t.error_type) for t in emitted]
    return (trajectories, list(result.losses.items()), result.incomplete, result.warnings,
            result.found, result.spans, list(result.batches.items()),
            result.writer_losses)  # fmt: skip


def _both(files, stream=True, **kwargs):
    """The sequential read and the parallel one (handing trajectories on as files come in,
    or at the end), with what each emitted in order."""
    seq_out, par_out, notes = [], [], []
    if any(v is not None for v in kwargs.values()):  # the same loop with another window
        seq = read_sources_parallel(files, jobs=1, emit=seq_out.append, warn=lambda m: None,
                                    **kwargs)  # fmt: skip
    else:
        seq = read_sources(files, emit=seq_out.append, warn=lambda m: None)
    par = read_sources_parallel(files, jobs=2, emit=par_out.append, warn=lambda m: None,
                                min_bytes=0, note=notes.append, own_process=True,
                                reset=par_out.clear if stream else None, **kwargs)  # fmt: skip
    return _as_tuple(seq, seq_out), _as_tuple(par, par_out), notes


@pytest.mark.parametrize(("window", "stream"), [(None, True), (60, True), (60, False)])
def test_rotated_files_read_in_parallel_give_the_sequential_figures_in_its_order(
    tmp_path, window, stream
):
    lines = _lines(seed=1)
    files = _rotate(tmp_path, lines, parts=5, seed=2)
    seq, par, notes = _both(files, stream, window_spans=window)
    assert notes == []  # exact without going sequential
    assert par == seq
    trajectories, losses = seq[0], dict(seq[1])
    assert len(trajectories) == 402 and losses  # duplicates, a bad line, an incomplete...
    # trajectories did straddle the rotations: their spans are in two files
    ids = [{json.loads(x)["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["traceId"]
            for x in Path(f).read_text().splitlines()
            if x.startswith('{"resourceSpans": [{"resource')}
           for f in files]  # fmt: skip
    assert any(ids[k] & ids[k + 1] for k in range(len(files) - 1))


def test_service_and_bands_reach_the_workers(tmp_path):
    files = _rotate(tmp_path, _lines(seed=15, n=100), parts=3, seed=16)
    seq, par, notes = _both(files, service="svc", bands={"env_setup": "llm"})
    assert notes == [] and par == seq
    assert {p[0].nanos["env_setup"] for p in seq[0]} == {0}  # counted as llm


def test_a_trace_named_again_in_a_later_file_keeps_its_place(tmp_path):
    # trace 1's root is in the first file and a span of it without a start (rejected, so
    # not late) in the second: it straddles, and still comes out before the trajectories
    # whose roots followed it in the first file
    rng = random.Random(14)
    first = [_line(_trajectory(rng, i, T0 + i)) for i in range(1, 40)]
    again = _span(1, 7, 1000, "llm", None, T0 + 5, **{A.PHASE: "llm"})
    second = [_line([again])] + [_line(_trajectory(rng, i, T0 + i)) for i in range(40, 80)]
    files = []
    for k, lines in enumerate((first, second)):
        f = tmp_path / f"traces-y_{k}.jsonl"
        f.write_text("".join(line + "\n" for line in lines))
        files.append(str(f))
    seq, par, notes = _both(files, window_spans=20)
    assert notes == [] and par == seq
    assert seq[0][0][0].trace_id == format(1, "032x")


def test_a_duplicate_just_before_a_root_does_not_hide_the_root(tmp_path):
    # a span written again in the line of another trajectory, just before that one's root:
    # the copy is refused, the root after it is taken (the worker tells which of a line's
    # spans the assembler refused), and the trajectories keep the sequential order
    rng = random.Random(18)
    trajectories = [_trajectory(rng, i, T0 + i) for i in range(1, 40)]
    again = trajectories[11][0]
    mixed = [s for s in trajectories[12] if "parentSpanId" in s]
    mixed += [again] + [s for s in trajectories[12] if "parentSpanId" not in s]
    lines = [_line(t) for t in trajectories[:12]] + [_line(mixed)]
    lines += [_line(t) for t in trajectories[13:]]
    files = []
    for k, part in enumerate((lines[:20], lines[20:])):
        f = tmp_path / f"traces-z_{k}.jsonl"
        f.write_text("".join(line + "\n" for line in part))
        files.append(str(f))
    seq, par, notes = _both(files, window_spans=20)
    assert notes == [] and par == seq
    assert dict(seq[1]) == {"duplicate spans ignored": 1}


def test_a_span_far_after_its_root_makes_the_read_sequential_with_the_same_figures(tmp_path):
    lines = _lines(seed=3, n=120)
    lines.append(lines[0])  # written again long after: the sequential read calls it late
    files = _rotate(tmp_path, lines, parts=3, seed=4)
    seq, par, notes = _both(files, window_spans=30)
    assert par == seq
    assert len(notes) == 1 and "after its root; read sequentially" in notes[0]


def test_a_full_read_buffer_makes_the_read_sequential_with_the_same_figures(tmp_path):
    files = _rotate(tmp_path, _lines(seed=5, n=100), parts=3, seed=6)
    seq, par, notes = _both(files, max_buffered_spans=40)
    assert par == seq
    assert len(notes) == 1 and "read buffer" in notes[0]


def test_the_command_prints_the_same_report_with_jobs(tmp_path, capsys, monkeypatch):
    files = _rotate(tmp_path, _lines(seed=7, n=150), parts=4, seed=8)
    monkeypatch.setattr(_parallel, "MIN_PARALLEL_BYTES", 0)
    glob = str(tmp_path / "traces-*.jsonl")
    out = {}
    for jobs in ("1", "2"):
        for fmt in ("json", "table"):
            rc = main(["report", glob, "--format", fmt, "--jobs", jobs, "--by", "run"]
                      if fmt == "json" else ["report", glob, "--jobs", jobs, "-v"])  # fmt: skip
            captured = capsys.readouterr()
            out[jobs, fmt] = (rc, captured.out, captured.err)
    assert out["1", "json"] == out["2", "json"] and out["1", "table"] == out["2", "table"]
    assert out["1", "json"][0] == 0 and "line skipped" in out["1", "json"][2]
    assert len(files) == 4


def test_jobs_must_be_a_positive_count(tmp_path, capsys):
    f = tmp_path / "t.jsonl"
    f.write_text(_lines(seed=9, n=3)[0] + "\n")
    with pytest.raises(SystemExit) as exc:
        main(["report", str(f), "--jobs", "0"])
    assert exc.value.code == 2
    assert "must be at least 1" in capsys.readouterr().err


def test_an_unreadable_file_is_the_sequential_error(tmp_path):
    files = _rotate(tmp_path, _lines(seed=10, n=30), parts=2, seed=11)
    missing = str(tmp_path / "traces-x_0009.jsonl")
    with pytest.raises(TraceReadError, match=r"traces-x_0009\.jsonl: cannot read"):
        read_sources_parallel([*files, missing], jobs=2, min_bytes=0, warn=lambda m: None)


def _dies(*args, **kwargs):
    os._exit(3)


def test_a_worker_that_dies_is_an_error_naming_its_file(tmp_path, monkeypatch):
    files = _rotate(tmp_path, _lines(seed=12, n=30), parts=2, seed=13)
    monkeypatch.setattr(_parallel, "read_file", _dies)
    with pytest.raises(TraceReadError, match=r"traces-x_0000\.jsonl: the process reading it"):
        read_sources_parallel(files, jobs=2, min_bytes=0, warn=lambda m: None)
