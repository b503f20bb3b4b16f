"""The report's loops in C (``otel_rollout._speedups``) give exactly what their Python
twins give, on any input: the same rows, attributes and phases, the same lines handed to
the general reader; and they are built wherever a C compiler is."""

from __future__ import annotations

import json
import shutil
import sysconfig
from array import array
from pathlib import Path

import _loops
import msgspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from otel_rollout import attributes as A
from otel_rollout._accounting import span_tree
from otel_rollout._accounting.breakdown import PhaseInterval
from otel_rollout._accounting.in_flight import SPAN_NAME as IN_FLIGHT
from otel_rollout.report import _otlp_typed
from otel_rollout.report._assemble import TraceAssembler
from otel_rollout.report._model import RawSpan, ReadResult

needs_c = pytest.mark.skipif(_loops._speedups is None, reason="_speedups is not built here")


def test_the_c_loops_are_built_where_a_c_compiler_is():
    cc = (sysconfig.get_config_var("CC") or "cc").split()[0]
    header = Path(sysconfig.get_paths()["include"]) / "Python.h"
    if shutil.which(cc) is None or not header.exists():
        pytest.skip(f"no C compiler ({cc}) or no Python.h: the Python loops run")
    assert _loops._speedups is not None, "pip install -e . did not build otel_rollout._speedups"
    assert _otlp_typed._span_rows is _loops._speedups.span_rows
    assert span_tree._compiled is _loops._speedups.sequential_children


# --- sequential_children -------------------------------------------------------------------

ROOT = 7
_ids = st.sampled_from([ROOT, 1, 2, 3, 2**64 - 1, 2**63, 0]) | st.integers(-(2**70), 2**70)
_times = st.integers(0, 100) | st.sampled_from([None, -1, 2**63 - 1, 2**63, 2**64 + 5, 1.5])
_phases = st.sampled_from([None, "llm", "env", "env_setup", "env_teardown", "reward", "", 3])
_record = st.tuples(_ids, st.one_of(st.none(), st.just(ROOT), _ids), _times, _times, _phases)


def _python(root, start, end, spans):
    try:
        return ("ok", span_tree._sequential_children(root, start, end, spans))
    except Exception as exc:
        return ("raised", type(exc))


@needs_c
@settings(max_examples=600, deadline=None)
@given(
    st.lists(_record, max_size=12),
    st.sampled_from([0, 5, 2**63 - 1, -1]),
    st.sampled_from([100, 50, 2**63 - 1, 0, 2**64]),
    st.booleans(),
)
def test_sequential_children_in_c_is_its_python_twin(spans, start, end, sorted_loop):
    if sorted_loop:  # a plain loop of the root's children more often than chance gives
        spans = sorted(((i + 10, ROOT, s, s + d, p) for i, (_, _, s, d, p) in enumerate(spans)
                        if isinstance(s, int) and isinstance(d, int) and s >= 0 and d > 0),
                       key=lambda r: r[2])  # fmt: skip
        last = 0
        spans = [r for r in spans if r[2] >= last and (last := r[3]) is not None]
    c = _loops._speedups.sequential_children(ROOT, start, end, spans, A.BANDS,
                                             PhaseInterval, array)  # fmt: skip
    expected = _python(ROOT, start, end, spans)
    if c is NotImplemented:
        return
    assert expected == ("ok", c)
    if c is not None:
        assert all(type(p) is PhaseInterval for p in c[0])


@needs_c
def test_a_plain_loop_is_taken_in_c_not_handed_back():
    spans = [(10, ROOT, 10, 20, "llm"), (11, ROOT, 20, 25, "env"), (ROOT, None, 0, 30, None)]
    got = _loops._speedups.sequential_children(ROOT, 0, 30, spans, A.BANDS,
                                               PhaseInterval, array)  # fmt: skip
    assert got == span_tree._sequential_children(ROOT, 0, 30, spans)
    assert got[2] == [10, 5, 0, 0] and list(got[1]) == [0, 10, 20, 1, 20, 25]


# --- span rows and attributes ----------------------------------------------------------------


def _mostly(good, odd):
    """``good`` twelve times in thirteen: an odd value fails its whole line, and most
    lines should read with several spans."""
    return st.integers(0, 12).flatmap(lambda i: odd if i == 6 else good)


_hex16 = st.sampled_from(["b7ad6b7169203331", "00f067aa0ba902b7", "B7AD6B7169203331"])
_odd_id = st.sampled_from(["", "b7ad6b716920333", "b7ad6b71692033zz", "b7ad 6b7169203331",
                           "t60bKWkgMzE=", "é7ad6b7169203331", None, 5])  # fmt: skip
_good_number = st.sampled_from(["1700000000000000000", "1700000000000001000", "17", 17])
_number = _mostly(_good_number, st.sampled_from(["", "0", "-5", " 12 ", "1_000", "1e3", "x",
                                                 0, 1.5, None, True]))  # fmt: skip
_value = _mostly(
    st.one_of(
        st.fixed_dictionaries({"stringValue": st.sampled_from(["llm", "env", "x", ""])}),
        st.fixed_dictionaries({"intValue": _good_number}),
        st.fixed_dictionaries({"doubleValue": st.sampled_from([0.5, 3, "NaN", "2.5"])}),
        st.fixed_dictionaries({"boolValue": st.booleans()}),
    ),
    st.one_of(
        st.fixed_dictionaries({"intValue": _number}),
        st.fixed_dictionaries({"doubleValue": st.sampled_from(["x", "1e400", "inf"])}),
        st.just({}),
        st.fixed_dictionaries({"arrayValue": st.fixed_dictionaries({"values": st.lists(
            st.fixed_dictionaries({"intValue": _number}) | st.just({"stringValue": "s"})
            | st.just({"arrayValue": {"values": [{"intValue": "x"}]}}), max_size=3)})}),
    ),
)  # fmt: skip
_key = st.sampled_from(["rollout.phase", "rollout.trajectory.id", "rollout.batch.id",
                        "vllm.time_in_queue", "k", "service.name", "rollout.run.id"])  # fmt: skip
_attribute = _mostly(st.fixed_dictionaries({"key": _key, "value": _value}),
                     st.fixed_dictionaries({"key": _key}))  # fmt: skip
_span = st.fixed_dictionaries(
    {
        "traceId": _mostly(
            st.just("0af7651916cd43dd8448eb211c80319c"), st.sampled_from(["", "abc"])
        ),
        "spanId": _mostly(_hex16, _odd_id),
    },
    optional={
        "parentSpanId": _mostly(_hex16, _odd_id),
        "name": st.sampled_from(["generate", "", None, "otel_rollout.in_flight"]),
        "startTimeUnixNano": _number,
        "endTimeUnixNano": _number,
        "attributes": st.lists(_attribute, max_size=5) | st.none(),
        "status": st.sampled_from([{}, {"code": 2}, {"code": "STATUS_CODE_ERROR"}]),
    },
)
_scope = st.fixed_dictionaries({"spans": st.lists(_span, min_size=1, max_size=4)})
_resource = st.fixed_dictionaries({"attributes": st.lists(_attribute, max_size=3)})
_document = st.fixed_dictionaries(
    {
        "resourceSpans": st.lists(
            st.fixed_dictionaries(
                {"scopeSpans": st.lists(_scope, min_size=1, max_size=2)},
                optional={"resource": _resource},
            ),
            min_size=1,
            max_size=2,
        )
    }
)


def _both(line, monkeypatch, read):
    """``read(line)`` with the loops in C, then in Python (repr: a NaN equals itself)."""
    c = repr(read(line))
    with monkeypatch.context() as m:
        _loops.use("python", m)
        python = repr(read(line))
    return c, python


@needs_c
@settings(max_examples=500, deadline=None)
@given(_document)
def test_span_rows_in_c_are_their_python_twins(doc):
    line = json.dumps(doc).encode()
    with pytest.MonkeyPatch.context() as monkeypatch:
        for read in (_otlp_typed.typed_rows, _otlp_typed.typed_spans):
            c, python = _both(line, monkeypatch, read)
            assert c == python


@needs_c
@settings(max_examples=300, deadline=None)
@given(st.lists(_attribute, max_size=6) | st.none())
def test_attributes_in_c_are_their_python_twin(kvs):
    try:
        decoded = _otlp_typed._decoder.decode(json.dumps({"resourceSpans": [
            {"resource": {"attributes": kvs}}]}).encode())  # fmt: skip
    except msgspec.ValidationError:  # not the typed shape: the general reader's line
        assume(False)
    values = decoded.resourceSpans[0].resource.attributes

    def read(how):
        try:
            return repr(how(values))
        except Exception as exc:
            return type(exc)

    assert read(_loops._speedups.attributes) == read(_otlp_typed._kv_attrs)


# --- the assembler's runs of plain rows --------------------------------------------------

_tids = st.sampled_from(["t1", "t2", "t3", "t4"])
_times = st.sampled_from([10, 20, 30, 40, 0, -5, None, 2**64, 25])
_whole_attrs = st.sampled_from([
    {A.TRAJECTORY_ID: "x", A.ENV_CLASS: "e"}, {A.BATCH_ID: "b1"},
    {A.VLLM_TIME_IN_QUEUE: 0.001}, {A.TRAJECTORY_ID: "y", "error.type": "boom"},
])  # fmt: skip


@st.composite
def _rows(draw):
    tid = draw(_tids)
    span_id = draw(st.integers(1, 8))
    parent = draw(st.sampled_from([None, 1, 2, 3]))
    name = draw(st.sampled_from(["generate", IN_FLIGHT]))
    start, end = draw(_times), draw(_times)
    phase = draw(st.sampled_from([None, "llm", "env"]))
    span = None
    if draw(st.integers(0, 3)) == 0:
        span = RawSpan(tid, span_id, parent, name, start or 0, end, draw(_whole_attrs))
    return (tid, span_id, parent, name, start, end, phase, span)


@st.composite
def _trajectory(draw):
    """A trajectory's rows: a loop of its root's children, mostly plain (one after
    another, inside the root), sometimes not; then its root."""
    tid = draw(_tids)
    root = draw(st.integers(50, 52))
    rows, t = [], 100
    for k in range(draw(st.integers(0, 5))):
        gap, length = draw(st.sampled_from([(0, 5), (1, 3), (-2, 4), (2, 0), (0, 7)]))
        phase = draw(st.sampled_from(["llm", "env", "env_setup", "llm", "reward", None]))
        parent = draw(st.sampled_from([root, root, root, root + 1, None]))
        rows.append((tid, 60 + k, parent, "step", t + gap, t + gap + length, phase, None))
        t += gap + length
    start, end = draw(st.sampled_from([(100, t + 1), (100, t), (101, t + 5), (90, t - 1)]))
    attrs = {A.TRAJECTORY_ID: "x"}
    rows.append((tid, root, None, "trajectory", start, end, None,
                 RawSpan(tid, root, None, "trajectory", start, end, attrs)))  # fmt: skip
    return rows


def _assembled(chunks, window, limit):
    result = ReadResult()
    out = []
    assembler = TraceAssembler(out.append, result, window_spans=window, max_buffered_spans=limit)
    for chunk in chunks:
        assembler.add_rows(list(chunk))
    peak = assembler.peak_buffered_spans
    assembler.finish()
    return repr((out, result, peak))


@needs_c
@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.lists(_rows(), max_size=12) | _trajectory(), max_size=5),
    st.integers(1, 30),
    st.integers(1, 40),
)
def test_the_assemblers_runs_in_c_are_its_python_loop(chunks, window, limit):
    c = _assembled(chunks, window, limit)
    with pytest.MonkeyPatch.context() as monkeypatch:
        _loops.use("python", monkeypatch)
        assert c == _assembled(chunks, window, limit)


@needs_c
def test_names_kept_past_their_line_are_shared_and_bounded():
    root = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "name": "trajectory",
        "startTimeUnixNano": "10",
        "endTimeUnixNano": "20",
        "attributes": [{"key": A.TRAJECTORY_ID, "value": {"stringValue": "t"}}]
        + [{"key": f"k{i}", "value": {"intValue": str(i)}} for i in range(5000)],
    }
    child = {
        "traceId": root["traceId"],
        "spanId": "00f067aa0ba902b7",
        "parentSpanId": root["spanId"],
        "name": "generate",
        "startTimeUnixNano": "11",
        "endTimeUnixNano": "12",
        "attributes": [{"key": "rollout.phase", "value": {"stringValue": "llm"}}],
    }
    line = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [child, root]}]}]}).encode()
    rows = _otlp_typed.typed_rows(line)
    assert rows[0][6] is A.PHASE_LLM  # the package's own object, not a copy per span
    keys = list(rows[1][7].attributes)
    assert keys[0] is A.TRAJECTORY_ID
    assert len(_otlp_typed._names) <= 4096 < 5000  # bounded, whatever the input
    with pytest.MonkeyPatch.context() as monkeypatch:
        c, python = _both(line, monkeypatch, _otlp_typed.typed_rows)
    assert c == python


def test_a_build_of_another_version_or_the_variable_turns_the_c_loops_off(monkeypatch):
    from otel_rollout._base import compiled

    if _loops._speedups is None:
        assert compiled.speedups() is None
        return
    assert compiled.speedups() is _loops._speedups
    monkeypatch.setenv("OTEL_ROLLOUT_PURE_PYTHON", "1")
    assert compiled.speedups() is None
    monkeypatch.setenv("OTEL_ROLLOUT_PURE_PYTHON", "0")
    assert compiled.speedups() is _loops._speedups
    monkeypatch.setattr(_loops._speedups, "API", compiled.API + 1)  # a stale build
    assert compiled.speedups() is None
