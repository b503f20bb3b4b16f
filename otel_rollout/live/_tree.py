"""A selected trajectory's span tree, drawn by the console exporter's renderer, from the
spans ``otel-rollout top`` holds for it (all of them once it finished, those that ended
so far while it runs), and its link into Jaeger."""

from __future__ import annotations

import os

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanContext, Status, StatusCode, TraceFlags

from otel_rollout import attributes as A
from otel_rollout._base.spanbuffer import TraceSpans
from otel_rollout._export.console_render import TreeRenderer
from otel_rollout.live._state import LiveState
from otel_rollout.report._model import RawSpan

DEFAULT_JAEGER = "http://localhost:16686"


def jaeger_url(trace_id: str, base: str | None = None) -> str:
    base = base or os.environ.get("OTEL_ROLLOUT_JAEGER_URL") or DEFAULT_JAEGER
    return f"{base.rstrip('/')}/trace/{trace_id}"


def _readable(s: RawSpan) -> ReadableSpan:
    tid = int(s.trace_id, 16)
    flags = TraceFlags(TraceFlags.SAMPLED)
    ctx = SpanContext(tid, s.span_id, is_remote=False, trace_flags=flags)
    parent = (SpanContext(tid, s.parent_id, is_remote=False, trace_flags=flags)
              if s.parent_id else None)  # fmt: skip
    status = Status(StatusCode.ERROR) if s.status_code is StatusCode.ERROR else Status()
    return ReadableSpan(name=s.name, context=ctx, parent=parent, attributes=s.attributes,
                        start_time=s.start_ns, end_time=s.end_ns, status=status)  # fmt: skip


def tree_text(state: LiveState, trace_id: str, bands: dict[str, str] | None = None,
              trajectory_id: str = "") -> str:  # fmt: skip
    """The tree of the trajectory (ANSI colours), or a line saying why there is none."""
    held = state.tree(trace_id, trajectory_id)
    if held is None or not held[0]:
        return (f"trace {trace_id}: no spans of it held (none ended yet, or it finished "
                "long ago); open it in Jaeger")  # fmt: skip
    spans, finished = held
    renderer = TreeRenderer(bands)
    roots = [s for s in spans if A.TRAJECTORY_ID in s.attributes]
    if trajectory_id:
        roots = [s for s in roots if s.attributes.get(A.TRAJECTORY_ID) == trajectory_id] or roots
    if finished and roots:
        root = roots[0]
        rest = [_readable(s) for s in spans if s is not root]
        return renderer.render_root(_readable(root), rest, True, False)
    buf = TraceSpans()
    for s in spans:
        buf.add(_readable(s))
    return renderer.render_partial(int(trace_id, 16), buf, "running: the spans that ended")
