"""Spans held per trace until their trajectory's root ends: the console exporter's and tail
keep's shared buffer. Bounded; not locked (its owner holds its own lock)."""

from __future__ import annotations

from collections import OrderedDict

from opentelemetry.sdk.trace import ReadableSpan


class TraceSpans:
    """The buffered spans of one trace, indexed by parent for subtree extraction."""

    __slots__ = ("children", "spans")

    def __init__(self) -> None:
        self.spans: dict[int, ReadableSpan] = {}
        self.children: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return len(self.spans)

    def add(self, span: ReadableSpan) -> None:
        sid = span.context.span_id
        self.spans[sid] = span
        if span.parent is not None:
            self.children.setdefault(span.parent.span_id, []).append(sid)


class SpanBuffer:
    """Spans per trace, oldest trace first, at most ``max_spans`` in all.

    :meth:`add` returns the traces pushed out to make room (oldest first), for the owner
    to print, drop or count; :meth:`take` removes a root's subtree when the root ends.
    """

    def __init__(self, max_spans: int) -> None:
        if isinstance(max_spans, bool) or not isinstance(max_spans, int):
            raise TypeError(f"max_buffered_spans must be an int, got {max_spans!r}")
        if max_spans < 1:
            raise ValueError(f"max_buffered_spans must be at least 1, got {max_spans!r}")
        self.max_spans = max_spans
        self._traces: OrderedDict[int, TraceSpans] = OrderedDict()
        self.buffered = 0

    def __contains__(self, trace_id: int) -> bool:
        return trace_id in self._traces

    def add(self, span: ReadableSpan) -> list[tuple[int, TraceSpans]]:
        tid = span.context.trace_id
        trace = self._traces.get(tid)
        if trace is None:
            trace = self._traces[tid] = TraceSpans()
        trace.add(span)
        self.buffered += 1
        evicted = []
        while self.buffered > self.max_spans and self._traces:
            old_tid, old = self._traces.popitem(last=False)
            self.buffered -= len(old)
            evicted.append((old_tid, old))
        return evicted

    def take(self, trace_id: int, root_id: int, *, with_root: bool = False) -> list[ReadableSpan]:
        """Remove and return the buffered descendants of ``root_id`` (and the root itself
        with ``with_root``); other spans of the trace (sibling trajectories) stay."""
        trace = self._traces.get(trace_id)
        if trace is None:
            return []
        out: list[ReadableSpan] = []
        stack = list(trace.children.pop(root_id, ()))
        while stack:
            span = trace.spans.pop(sid := stack.pop(), None)
            if span is not None:
                out.append(span)
                stack.extend(trace.children.pop(sid, ()))
        root = trace.spans.pop(root_id, None)
        if with_root and root is not None:
            out.append(root)
        self.buffered -= len(out) + (0 if with_root or root is None else 1)
        if not trace.spans:
            del self._traces[trace_id]
        return out

    def drain(self) -> list[tuple[int, TraceSpans]]:
        """Remove and return every trace, oldest first."""
        out = list(self._traces.items())
        self._traces.clear()
        self.buffered = 0
        return out
