"""Each reader of the SDK's private state answers what the public API answers, on a real
SDK span and context. Run on the newest SDK (the main venv) and the oldest the project
supports (``opentelemetry-sdk==1.30.0``, ``.ci/steps/11-oldest-sdk.sh``): an SDK that
moved a field fails here, not in a user's run."""

from __future__ import annotations

import logging

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.trace import Link, Status, StatusCode

from otel_rollout._base import sdk_access


class _Seen(SpanProcessor):
    def __init__(self) -> None:
        self.started: list = []
        self.ended: list = []

    def on_start(self, span, parent_context=None):
        self.started.append((sdk_access.started(span), span.attributes, span.parent,
                             span.get_span_context(), span.start_time))  # fmt: skip

    def on_end(self, span):
        self.ended.append((sdk_access.ended(span), span, sdk_access.attributes(span)))


def _provider() -> tuple[TracerProvider, _Seen]:
    provider = TracerProvider()
    seen = _Seen()
    provider.add_span_processor(seen)
    return provider, seen


def test_the_hooks_read_the_fields_the_public_api_answers():
    provider, seen = _provider()
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("root", attributes={"a": 1}) as root:
        with tracer.start_as_current_span("child", attributes={"b": "x"}):
            pass
        root.set_attribute("late", True)
    for (raw, parent, ctx, start), attrs, pub_parent, pub_ctx, pub_start in seen.started:
        assert dict(raw) == dict(attrs) and parent == pub_parent
        assert tuple(ctx) == tuple(pub_ctx) and start == pub_start
    for (sid, end, raw), span, plain in seen.ended:
        assert sid == span.context.span_id and end == span.end_time
        assert dict(raw) == dict(span.attributes) == dict(plain)
    assert seen.ended[-1][2]["late"] is True


def test_attributes_of_a_span_of_another_kind_come_from_its_property():
    span = ReadableSpan(name="x", attributes={"k": 1})
    assert dict(sdk_access.attributes(span)) == {"k": 1}


def test_the_context_variable_is_the_one_the_api_reads_and_sets():
    var = sdk_access.context_var()
    assert var is not None
    ctx = trace.set_span_in_context(trace.NonRecordingSpan(trace.SpanContext(1, 2, False)))
    token = var.set(ctx)
    try:
        assert otel_context.get_current() is ctx
    finally:
        var.reset(token)
    assert otel_context.get_current() is not ctx


def test_a_token_detached_in_another_context_is_a_quiet_no_op(caplog):
    import contextvars

    token = otel_context.attach(otel_context.set_value("k", "v"))
    caplog.set_level(logging.ERROR)
    other = contextvars.Context()
    other.run(sdk_access.detach_quietly, token)  # the token belongs to this context
    assert not [r for r in caplog.records if "detach" in r.getMessage().lower()]
    sdk_access.detach_quietly(token)
    assert otel_context.get_value("k") is None


def test_span_fields_are_the_public_properties():
    provider, seen = _provider()
    tracer = provider.get_tracer("t")
    other = trace.SpanContext(3, 4, True)
    links = [Link(other, {"l": 1})]
    with (
        tracer.start_as_current_span("root"),
        tracer.start_as_current_span("child", attributes={"k": "v"}, links=links) as span,
    ):
        span.add_event("e", {"x": 1.5})
        span.set_status(Status(StatusCode.ERROR, "bad"))
    span = seen.ended[0][1]
    (ctx, parent, name, kind, start, end, attrs, dropped_attrs, events, dropped_events,
     links, dropped_links, status) = sdk_access.span_fields(span)  # fmt: skip
    assert tuple(ctx) == tuple(span.context) and tuple(parent) == tuple(span.parent)
    assert (name, kind, start, end) == (span.name, span.kind, span.start_time, span.end_time)
    assert dict(attrs) == dict(span.attributes) and dropped_attrs == span.dropped_attributes
    assert list(events) == list(span.events) and dropped_events == span.dropped_events
    assert list(links) == list(span.links) and dropped_links == span.dropped_links
    assert (status.status_code, status.description) == (StatusCode.ERROR, "bad")


def test_a_span_type_with_its_own_properties_is_read_through_them():
    class Renamed(ReadableSpan):
        @property
        def name(self):
            return "renamed"

    assert sdk_access.span_fields(Renamed(name="x"))[2] == "renamed"
