"""The trace file's encoder writes what the official OTLP JSON encoder writes, once parsed.

Random spans made through the SDK (so its attribute rules apply), covering every attribute
type (text with non-ASCII characters and lone surrogates, bools, ints beyond 64 bits,
floats with NaN and infinities, sequences of each), events, links, trace state, status,
kinds, remote parents, several resources and scopes (equal ones too) in one batch.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
    set_span_in_context,
)
from opentelemetry.trace.span import TraceState
from opentelemetry.trace.status import Status, StatusCode

from otel_rollout._export.otlp_json import encode_spans_line
from otel_rollout._processing.tailkeep import _as_sampled

_ODD = ["\ud800", "\udfff", "\udbff\udc00", "é", "日本", "\x00", '"', "\\", "\u2028", "😀"]
texts = st.one_of(st.text(max_size=12), st.lists(st.sampled_from(_ODD), max_size=6).map("".join))
keys = st.text(st.sampled_from([*"abc.é日", "\ud800"]), min_size=1, max_size=6)
ints = st.one_of(st.integers(-(2**63), 2**63 - 1), st.integers(-(10**30), 10**30))
floats = st.floats(allow_nan=True, allow_infinity=True)
scalars = st.one_of(texts, st.booleans(), ints, floats)
sequences = st.one_of(
    *(st.lists(s, max_size=4).map(tuple) for s in (texts, st.booleans(), ints, floats))
)
attributes = st.dictionaries(keys, st.one_of(scalars, sequences), max_size=6)
ids = st.integers(1, 2**64 - 1)
trace_ids = st.integers(1, 2**128 - 1)
times = st.integers(1, 2**63 - 1)
states = st.lists(
    st.tuples(st.sampled_from(["a", "vendor", "k1"]), st.sampled_from(["1", "x-y", "z"])),
    max_size=3,
)


@st.composite
def span_specs(draw):
    return {
        "name": draw(texts),
        "kind": draw(st.sampled_from(list(SpanKind))),
        "attributes": draw(attributes),
        "parent": draw(st.none() | st.tuples(trace_ids, ids, st.booleans(), states)),
        "events": draw(st.lists(st.tuples(texts, attributes, times), max_size=3)),
        "links": draw(st.lists(st.tuples(trace_ids, ids, st.booleans(), attributes), max_size=3)),
        "status": draw(st.sampled_from(list(StatusCode))),
        "description": draw(st.none() | texts),
        "start": draw(times),
        "length": draw(st.integers(0, 10**12)),
        "tracer": draw(st.integers(0, 2)),
    }


@st.composite
def batches(draw):
    resources = draw(
        st.lists(
            st.tuples(attributes, st.sampled_from(["", "https://s/1"])), min_size=1, max_size=2
        )
    )
    scopes = draw(
        st.lists(
            st.tuples(texts, st.none() | texts, st.none() | attributes), min_size=1, max_size=2
        )
    )
    return resources, scopes, draw(st.lists(span_specs(), min_size=1, max_size=6))


def _make(resources, scopes, specs):
    exporter = InMemorySpanExporter()
    tracers = []
    # an equal copy of the first resource: the official encoder merges equal resources
    for attrs, schema in [*resources, resources[0]]:
        # not kept alive after the example (atexit would hold it): in a forked child the
        # SDK's after-fork hook of every live provider runs, and it can hang there
        provider = TracerProvider(
            resource=Resource(attrs, schema_url=schema), shutdown_on_exit=False
        )
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        for name, version, scope_attrs in scopes:
            tracers.append(provider.get_tracer(name, version, "https://scope/1", scope_attrs))
    for spec in specs:
        ctx = None
        if spec["parent"] is not None:
            tid, sid, remote, state = spec["parent"]
            parent = SpanContext(tid, sid, remote, TraceFlags(1), TraceState(state))
            ctx = set_span_in_context(NonRecordingSpan(parent))
        links = [Link(SpanContext(t, s, r, TraceFlags(1)), a) for t, s, r, a in spec["links"]]
        tracer = tracers[spec["tracer"] % len(tracers)]
        span = tracer.start_span(
            spec["name"],
            context=ctx,
            kind=spec["kind"],
            attributes=spec["attributes"],
            links=links,
            start_time=spec["start"],
        )
        for name, attrs, ts in spec["events"]:
            span.add_event(name, attrs, timestamp=ts)
        span.set_status(Status(spec["status"], spec["description"]))
        span.end(end_time=spec["start"] + spec["length"])
    return exporter.get_finished_spans()


def _official(spans):
    data = encode_spans(spans)
    if not data.resource_spans:
        return None
    return json.loads(json.dumps(data.to_dict(), separators=(",", ":")))


def _ours(spans):
    line = encode_spans_line(spans)
    if line is None:
        return None
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    return json.loads(line)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_random_spans_encode_as_the_official_encoder_does(batch):
    spans = _make(*batch)
    assert _ours(spans) == _official(spans)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches())
def test_copies_of_spans_encode_as_the_originals(batch):
    # tail keep hands the exporter ReadableSpan copies, read through their properties
    spans = [_as_sampled(s) for s in _make(*batch)]
    assert _ours(spans) == _official(spans)


def test_an_empty_batch_is_no_line():
    assert encode_spans_line([]) is None


def test_non_ascii_text_is_written_as_utf8_and_a_lone_surrogate_escaped():
    spans = _make(
        [({"k": "日本"}, "")],
        [("s", None, None)],
        [
            {
                "name": "é",
                "kind": SpanKind.INTERNAL,
                "attributes": {"x": "a\ud800"},
                "parent": None,
                "events": [],
                "links": [],
                "status": StatusCode.UNSET,
                "description": None,
                "start": 1,
                "length": 1,
                "tracer": 0,
            }
        ],
    )
    line = encode_spans_line(spans)
    assert b"\\ud800" in line  # the standard library's escape, as the official file has
    assert json.loads(line)["resourceSpans"][0]["resource"]["attributes"][0]["value"] == {
        "stringValue": "日本"
    }
    plain = _make(
        [({"k": "日本"}, "")],
        [("s", None, None)],
        [
            {
                "name": "é",
                "kind": SpanKind.INTERNAL,
                "attributes": {},
                "parent": None,
                "events": [],
                "links": [],
                "status": StatusCode.UNSET,
                "description": None,
                "start": 1,
                "length": 1,
                "tracer": 0,
            }
        ],
    )
    assert "日本".encode() in encode_spans_line(plain)  # UTF-8, not escaped
