"""A span exporter that prints each trajectory as an indented tree with its breakdown
(docs/agent-loop.md); the text comes from :mod:`otel_rollout._export.console_render`."""

from __future__ import annotations

import sys
import threading
from collections.abc import Mapping, Sequence
from typing import TextIO

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_rollout import attributes as A
from otel_rollout._base.errors import internal_error, warn_once
from otel_rollout._base.fork import reset_in_child
from otel_rollout._base.spanbuffer import SpanBuffer
from otel_rollout._base.text import printable_for
from otel_rollout._export.console_render import TreeRenderer, color_enabled, strip_ansi

__all__ = ["ConsoleTreeExporter"]


class ConsoleTreeExporter(SpanExporter):
    """Prints each trajectory, once its root span ends, as its span tree and breakdown.

    Spans wait per trace for their trajectory root (or local root); past
    ``max_buffered_spans`` the oldest trace prints at once as a partial tree, and at
    shutdown what still waits does too. A span ending after its tree printed is one
    ``late`` line. ``export`` writes: ``configure()`` runs it under the guarded batch
    processor, whose thread waits on the stream, never the agent loop. ``stream``:
    ``sys.stdout`` at each write; ``color=None``: only on a TTY and without ``NO_COLOR``.
    """

    def __init__(self, stream: TextIO | None = None, *, color: bool | None = None,
                 max_buffered_spans: int = 10_000,
                 bands: Mapping[str, str] | None = None) -> None:  # fmt: skip
        if color is not None and not isinstance(color, bool):
            raise TypeError(f"color must be True, False or None (auto), got {color!r}")
        self._max_spans = max_buffered_spans
        self._stream, self._color, self._bands = stream, color, bands
        #: Spans printed early as partial trees because the buffer was full.
        self.flushed_spans = 0
        self._reset()
        reset_in_child(self, ConsoleTreeExporter._reset)  # a child prints its own spans only

    def _reset(self) -> None:
        self._lock = threading.Lock()  # a SimpleSpanProcessor exports from any thread
        self._buffer = SpanBuffer(self._max_spans)
        self._renderer = TreeRenderer(self._bands)
        self._shutdown = False

    @property
    def buffered_spans(self) -> int:
        """Spans held, waiting for their trajectory or local root."""
        return self._buffer.buffered

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with self._lock:
            if self._shutdown:
                return SpanExportResult.FAILURE
            try:
                text = "".join(c for span in spans for c in self._accept(span))
            except Exception as exc:
                internal_error("ConsoleTreeExporter.export", exc)
                return SpanExportResult.FAILURE
            return SpanExportResult.SUCCESS if self._write(text) else SpanExportResult.FAILURE

    def shutdown(self) -> None:
        """Print every trace still waiting as a partial tree."""
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            try:
                render = self._renderer.render_partial
                text = "".join(render(tid, list(buf.spans.values()), "root not ended at shutdown")
                               for tid, buf in self._buffer.drain())  # fmt: skip
            except Exception as exc:
                internal_error("ConsoleTreeExporter.shutdown", exc)
                return
            self._write(text)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # export writes at once

    def _accept(self, span: ReadableSpan) -> list[str]:
        ctx, parent, r = span.context, span.parent, self._renderer
        is_trajectory = A.TRAJECTORY_ID in (span.attributes or {})
        if is_trajectory or parent is None or parent.is_remote:
            descendants = self._buffer.take(ctx.trace_id, ctx.span_id)
            text = r.render_root(span, descendants, is_trajectory,
                                 earlier=r.flushed.pop(ctx.trace_id, False))  # fmt: skip
            r.remember(ctx.span_id, span.start_time or 0, 0, r.label(span))
            return [text]
        printed = r.printed.get(parent.span_id)
        if printed is not None:
            return [r.render_late(span, *printed)]
        out = []
        for tid, old in self._buffer.add(span):
            self.flushed_spans += len(old)
            r.mark_flushed(tid)
            out.append(r.render_partial(tid, list(old.spans.values()), "buffer full"))
            warn_once("console:overflow", "otel-rollout: console exporter buffer full (%d "
                      "spans); printing the oldest traces as partial trees before their root "
                      "ends", self._buffer.max_spans)  # fmt: skip
        return out

    def _write(self, text: str) -> bool:
        if not text:
            return True
        try:
            out = self._stream if self._stream is not None else sys.stdout
            if not color_enabled(out, self._color):
                text = strip_ansi(text)
            out.write(printable_for(out, text))  # odd text in ids is escaped, never fatal
            out.flush()
        except Exception as exc:
            warn_once("console:stream", "otel-rollout: console exporter cannot write to its "
                      "stream (reported once): %r", exc)  # fmt: skip
            return False
        return True
