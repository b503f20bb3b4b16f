"""A span exporter that prints each trajectory as an indented tree with its breakdown."""

from __future__ import annotations

import os
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode

from otel_rollout import _attributes as A
from otel_rollout._breakdown import SpanRecord, breakdown_from_tree, root_labels
from otel_rollout._errors import internal_error, warn_once

#: Printed roots (and spans flushed early) remembered, so a span ending after its
#: trajectory was printed shows as one "late" line instead of waiting in the buffer.
_MAX_REMEMBERED = 4096
_NAME_WIDTH_MAX = 48

_RESET = "\x1b[0m"
_BOLD = "\x1b[1m"
_DIM = "\x1b[2m"
_RED = "\x1b[31m"
_GREEN = "\x1b[32m"
_YELLOW = "\x1b[33m"
_BLUE = "\x1b[34m"
_MAGENTA = "\x1b[35m"
_CYAN = "\x1b[36m"
_PHASE_COLORS = {
    A.PHASE_LLM: _CYAN,
    A.PHASE_ENV: _YELLOW,
    A.PHASE_ENV_SETUP: _MAGENTA,
    A.PHASE_ENV_TEARDOWN: _MAGENTA,
    A.BAND_OTHER: _BLUE,
}
_STATUS_COLORS = {A.STATUS_OK: _GREEN, A.STATUS_ERROR: _RED, A.STATUS_CANCELLED: _YELLOW}


def format_duration(seconds: float) -> str:
    """A short human duration: ``850us``, ``12.3ms``, ``1.234s``, ``4m05.2s``, ``1h02m``."""
    if seconds < 0:
        seconds = 0.0
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f}us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f}ms"
    if seconds < 60.0:
        return f"{seconds:.3f}s"
    if seconds < 3600.0:
        minutes, rest = divmod(seconds, 60.0)
        return f"{int(minutes)}m{rest:04.1f}s"
    hours, rest = divmod(seconds, 3600.0)
    return f"{int(hours)}h{int(rest // 60):02d}m"


def color_enabled(stream: Any, color: bool | None) -> bool:
    """Whether to colour output: forced by ``color``, else a TTY without ``NO_COLOR`` set."""
    if color is not None:
        return color
    if os.environ.get("NO_COLOR", ""):
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except Exception:
        return False


class _Trace:
    """The buffered spans of one trace, indexed by parent for subtree extraction."""

    __slots__ = ("children", "spans")

    def __init__(self) -> None:
        self.spans: dict[int, ReadableSpan] = {}
        self.children: dict[int, list[int]] = {}

    def add(self, span: ReadableSpan) -> None:
        sid = span.context.span_id
        self.spans[sid] = span
        if span.parent is not None:
            self.children.setdefault(span.parent.span_id, []).append(sid)

    def take_subtree(self, root_id: int) -> list[ReadableSpan]:
        """Remove and return the buffered descendants of ``root_id`` (not the root)."""
        out: list[ReadableSpan] = []
        stack = list(self.children.pop(root_id, ()))
        while stack:
            sid = stack.pop()
            span = self.spans.pop(sid, None)
            if span is None:
                continue
            out.append(span)
            stack.extend(self.children.pop(sid, ()))
        return out


class ConsoleTreeExporter(SpanExporter):
    """Prints each trajectory as an indented span tree followed by its time breakdown.

    Spans are buffered per trace until the trajectory root (the span carrying
    ``rollout.trajectory.id``) arrives; then the root line (env class, trajectory id,
    status, e2e, reward), its descendants indented by depth in start-time order (offset
    from the root's start, duration, phase, tokens, finish reason) and a breakdown line
    are written in one piece. The breakdown comes from the root's ``rollout.breakdown.*``
    attributes (written by :class:`~otel_rollout.BreakdownProcessor`), else it is computed
    from the buffered spans (``bands`` maps custom phases as the processor's option does).
    Traces without a trajectory root print as plain trees when their local root ends. A
    span that ends after its trajectory was printed prints as one ``late`` line.

    ``stream`` defaults to ``sys.stdout``, looked up at each print. ``color=None`` colours
    only a TTY and only when ``NO_COLOR`` is unset or empty; ``True``/``False`` force it.

    At most ``max_buffered_spans`` spans are held. Beyond that the oldest trace is printed
    at once as a partial tree (marked ``partial: buffer full``), so nothing is lost
    silently and memory stays bounded; a warning is logged the first time. When its root
    arrives later it prints with its breakdown and a note that earlier spans printed above.

    ``export()`` never raises: a stream that fails makes it return ``FAILURE`` and the
    error is logged once. ``shutdown()`` prints what is still buffered as partial trees.
    Thread-safe: each tree is written with one ``write`` call under a lock.
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        color: bool | None = None,
        max_buffered_spans: int = 10_000,
        bands: Mapping[str, str] | None = None,
    ) -> None:
        if isinstance(max_buffered_spans, bool) or not isinstance(max_buffered_spans, int):
            raise TypeError(f"max_buffered_spans must be an int, got {max_buffered_spans!r}")
        if max_buffered_spans < 1:
            raise ValueError(f"max_buffered_spans must be at least 1, got {max_buffered_spans!r}")
        if color is not None and not isinstance(color, bool):
            raise TypeError(f"color must be True, False or None (auto), got {color!r}")
        self._stream = stream
        self._color = color
        self._max = max_buffered_spans
        self._bands = dict(bands) if bands else None
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._traces: OrderedDict[int, _Trace] = OrderedDict()
        self._buffered = 0
        # span id -> (start ns of the tree it printed in, depth, label of that tree)
        self._printed: OrderedDict[int, tuple[int, int, str]] = OrderedDict()
        self._flushed_traces: OrderedDict[int, bool] = OrderedDict()
        self._shutdown = False
        #: Spans printed early as partial trees because the buffer was full.
        self.flushed_spans = 0
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (e := ref()) and e._reset())

    # --- SpanExporter -------------------------------------------------------------------
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            with self._lock:
                if self._shutdown:
                    return SpanExportResult.FAILURE
                chunks = [c for span in spans for c in self._accept_locked(span)]
        except Exception as exc:
            internal_error("ConsoleTreeExporter.export", exc)
            return SpanExportResult.FAILURE
        return self._write(chunks)

    def shutdown(self) -> None:
        """Print every trace still buffered as a partial tree, then stop accepting spans."""
        try:
            with self._lock:
                if self._shutdown:
                    return
                self._shutdown = True
                chunks = []
                while self._traces:
                    tid, buf = self._traces.popitem(last=False)
                    chunks.append(self._render_partial(tid, buf, "root not ended at shutdown"))
                self._buffered = 0
        except Exception as exc:
            internal_error("ConsoleTreeExporter.shutdown", exc)
            return
        self._write(chunks)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Flush the stream; trees still waiting for their root stay buffered."""
        try:
            with self._write_lock:
                flush = getattr(self._out(), "flush", None)
                if flush is not None:
                    flush()
            return True
        except Exception as exc:
            warn_once("console:stream", "otel-rollout: console exporter cannot flush: %r", exc)
            return False

    @property
    def buffered_spans(self) -> int:
        """Spans held, waiting for their trajectory or local root."""
        return self._buffered

    # --- buffering ------------------------------------------------------------------------
    def _accept_locked(self, span: ReadableSpan) -> list[str]:
        ctx = span.context
        tid, sid = ctx.trace_id, ctx.span_id
        parent = span.parent
        is_trajectory = A.TRAJECTORY_ID in (span.attributes or {})
        if is_trajectory or parent is None or parent.is_remote:
            buf = self._traces.get(tid)
            descendants: list[ReadableSpan] = []
            if buf is not None:
                descendants = buf.take_subtree(sid)
                buf.spans.pop(sid, None)
                self._buffered -= len(descendants)
                if not buf.spans:
                    del self._traces[tid]
            earlier = self._flushed_traces.pop(tid, False)
            text = self._render_root(span, descendants, is_trajectory, earlier)
            self._remember(sid, span.start_time or 0, 0, self._label(span))
            return [text]
        if parent.span_id in self._printed:
            start, depth, label = self._printed[parent.span_id]
            self._remember(sid, start, depth + 1, label)
            return [self._render_late(span, start, depth + 1, label)]
        buf = self._traces.get(tid)
        if buf is None:
            buf = self._traces[tid] = _Trace()
        buf.add(span)
        self._buffered += 1
        out = []
        while self._buffered > self._max and self._traces:
            old_tid, old = self._traces.popitem(last=False)
            self._buffered -= len(old.spans)
            self.flushed_spans += len(old.spans)
            self._flushed_traces[old_tid] = True
            if len(self._flushed_traces) > _MAX_REMEMBERED:
                self._flushed_traces.popitem(last=False)
            out.append(self._render_partial(old_tid, old, "buffer full"))
            warn_once(
                "console:overflow",
                "otel-rollout: console exporter buffer full (%d spans); printing the oldest "
                "traces as partial trees before their root ends",
                self._max,
            )
        return out

    def _remember(self, sid: int, start: int, depth: int, label: str) -> None:
        self._printed[sid] = (start, depth, label)
        if len(self._printed) > _MAX_REMEMBERED:
            self._printed.popitem(last=False)

    # --- output -----------------------------------------------------------------------------
    def _out(self) -> Any:
        return self._stream if self._stream is not None else sys.stdout

    def _write(self, chunks: list[str]) -> SpanExportResult:
        if not chunks:
            return SpanExportResult.SUCCESS
        text = "".join(chunks)
        try:
            with self._write_lock:
                out = self._out()
                if not color_enabled(out, self._color):
                    text = _strip_ansi(text)
                out.write(text)
                flush = getattr(out, "flush", None)
                if flush is not None:
                    flush()
        except Exception as exc:
            warn_once(
                "console:stream",
                "otel-rollout: console exporter cannot write to its stream (reported once): %r",
                exc,
            )
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    # --- rendering (always with colour codes; stripped at write time when disabled) ----------
    @staticmethod
    def _label(span: ReadableSpan) -> str:
        attrs = span.attributes or {}
        tid = attrs.get(A.TRAJECTORY_ID)
        return f"trajectory {tid}" if tid is not None else span.name

    def _render_root(
        self,
        root: ReadableSpan,
        descendants: list[ReadableSpan],
        is_trajectory: bool,
        earlier: bool,
    ) -> str:
        attrs = root.attributes or {}
        start = root.start_time or 0
        end = root.end_time or start
        lines = []
        if is_trajectory:
            lines.append(self._trajectory_line(root, attrs, end - start))
        else:
            head = f"{_BOLD}{root.name}{_RESET}  {format_duration((end - start) * 1e-9)}"
            if root.status.status_code is StatusCode.ERROR:
                head += f"  {_RED}ERROR{_RESET}"
            lines.append(f"{head}  {_DIM}trace {root.context.trace_id:032x}{_RESET}")
        if earlier:
            lines.append(
                f"  {_DIM}(earlier spans of this trace printed above: buffer full){_RESET}"
            )
        lines.extend(self._tree_lines(root.context.span_id, descendants, start, 1))
        if is_trajectory:
            lines.append(self._breakdown_line(root, attrs, descendants))
        return "\n".join(lines) + "\n"

    def _trajectory_line(self, root: ReadableSpan, attrs: Mapping[str, Any], e2e_ns: int) -> str:
        status, env_class, model, _ = root_labels(
            attrs, root.status.status_code is StatusCode.ERROR
        )
        parts = [f"{_BOLD}trajectory{_RESET}"]
        if env_class is not None:
            parts.append(f"{_BOLD}{env_class}{_RESET}")
        parts.append(str(attrs.get(A.TRAJECTORY_ID)))
        parts.append(f"{_STATUS_COLORS.get(status, _RED)}{status}{_RESET}")
        parts.append(f"e2e {_BOLD}{format_duration(e2e_ns * 1e-9)}{_RESET}")
        reward = attrs.get(A.REWARD)
        if reward is not None:
            parts.append(f"reward {_num(reward)}")
        turns = attrs.get(A.TURNS)
        if turns is not None:
            parts.append(f"turns {turns}")
        if model is not None:
            parts.append(f"model {model}")
        error = attrs.get(A.ERROR_TYPE)
        if error is not None:
            parts.append(f"{_RED}{error}{_RESET}")
        parts.append(f"{_DIM}trace {root.context.trace_id:032x}{_RESET}")
        return "  ".join(parts)

    def _tree_lines(
        self, root_id: int, spans: list[ReadableSpan], origin: int, base_depth: int
    ) -> list[str]:
        """Lines for the descendants of ``root_id``, depth first, siblings by start time."""
        children: dict[int | None, list[ReadableSpan]] = {}
        for s in spans:
            children.setdefault(s.parent.span_id if s.parent else None, []).append(s)
        rows: list[tuple[int, ReadableSpan]] = []
        stack = [(base_depth, c) for c in _by_start(children.get(root_id, []), reverse=True)]
        while stack:
            depth, span = stack.pop()
            rows.append((depth, span))
            kids = children.get(span.context.span_id, [])
            stack.extend((depth + 1, c) for c in _by_start(kids, reverse=True))
        return self._rows(rows, origin)

    def _rows(self, rows: list[tuple[int, ReadableSpan]], origin: int) -> list[str]:
        width = min(_NAME_WIDTH_MAX, max((2 * d + len(s.name) for d, s in rows), default=0))
        return [self._span_line(span, depth, origin, width) for depth, span in rows]

    def _span_line(self, span: ReadableSpan, depth: int, origin: int, width: int) -> str:
        attrs = span.attributes or {}
        start = span.start_time or origin
        end = span.end_time or start
        name = ("  " * depth + span.name).ljust(width)
        phase = attrs.get(A.PHASE)
        tag = f"[{phase}]" if phase is not None else ""
        color = _PHASE_COLORS.get(str(phase), _BLUE) if phase is not None else ""
        tag_cell = (f"{color}{tag}{_RESET}" if tag else "") + " " * max(0, 15 - len(tag))
        offset = "+" + format_duration((start - origin) * 1e-9)
        line = (
            f"{name}  {tag_cell}{_DIM}{offset:>9}{_RESET}  "
            f"{format_duration((end - start) * 1e-9):>9}"
        )
        extras = []
        turn = attrs.get(A.TURN)
        if turn is not None:
            extras.append(f"turn {turn}")
        tin = attrs.get(A.GEN_AI_USAGE_INPUT_TOKENS)
        tout = attrs.get(A.GEN_AI_USAGE_OUTPUT_TOKENS)
        if tin is not None or tout is not None:
            extras.append(f"tokens in={_or_dash(tin)} out={_or_dash(tout)}")
        reasons = attrs.get(A.GEN_AI_RESPONSE_FINISH_REASONS)
        if reasons:
            text = reasons if isinstance(reasons, str) else ",".join(str(r) for r in reasons)
            extras.append(f"finish {text}")
        if span.status.status_code is StatusCode.ERROR:
            extras.append(f"{_RED}ERROR {attrs.get(A.ERROR_TYPE, '')}".rstrip() + _RESET)
        if extras:
            line += "  " + "  ".join(extras)
        return line.rstrip()

    def _breakdown_line(
        self, root: ReadableSpan, attrs: Mapping[str, Any], descendants: list[ReadableSpan]
    ) -> str:
        values = _breakdown_from_attributes(attrs)
        note = ""
        if values is None:
            values = self._compute_breakdown(root, descendants)
            note = f"  {_DIM}(computed from spans){_RESET}"
        e2e = values.get("e2e") or 0.0
        cells = []
        for band in A.ALL_BANDS:
            v = values.get(band) or 0.0
            pct = 100.0 * v / e2e if e2e > 0 else 0.0
            cell = f"{_PHASE_COLORS[band]}{band}{_RESET} {format_duration(v)} {pct:.1f}%"
            total = values.get(band + "_sum")
            if total is not None and total > v * (1 + 1e-9) + 1e-9:
                cell += f" {_DIM}(sum {format_duration(total)}){_RESET}"
            cells.append(cell)
        return f"  {_BOLD}breakdown{_RESET}  " + "  ".join(cells) + note

    def _compute_breakdown(
        self, root: ReadableSpan, descendants: list[ReadableSpan]
    ) -> dict[str, float]:
        bd, _ = breakdown_from_tree(
            SpanRecord.from_span(root),
            [SpanRecord.from_span(s) for s in descendants],
            root.attributes or {},
            error=root.status.status_code is StatusCode.ERROR,
            bands=self._bands,
        )
        out: dict[str, float] = {"e2e": bd.e2e}
        for band in A.ALL_BANDS:
            out[band] = getattr(bd, band)
        for band in A.BANDS:
            out[band + "_sum"] = getattr(bd, band + "_sum")
        return out

    def _render_late(self, span: ReadableSpan, origin: int, depth: int, label: str) -> str:
        line = self._span_line(span, depth, origin, 2 * depth + len(span.name))
        return f"{_YELLOW}late{_RESET} ({label}, ended after it was printed): {line.lstrip()}\n"

    def _render_partial(self, trace_id: int, buf: _Trace, reason: str) -> str:
        spans = list(buf.spans.values())
        origin = min((s.start_time or 0 for s in spans), default=0)
        ids = buf.spans.keys()
        tops = [s for s in spans if s.parent is None or s.parent.span_id not in ids]
        children: dict[int, list[ReadableSpan]] = {}
        for s in spans:
            if s.parent is not None and s.parent.span_id in ids:
                children.setdefault(s.parent.span_id, []).append(s)
        rows: list[tuple[int, ReadableSpan]] = []
        stack = [(1, s) for s in _by_start(tops, reverse=True)]
        while stack:
            depth, span = stack.pop()
            rows.append((depth, span))
            self._remember(span.context.span_id, origin, depth, f"trace {trace_id:032x}")
            kids = children.get(span.context.span_id, [])
            stack.extend((depth + 1, c) for c in _by_start(kids, reverse=True))
        head = (
            f"{_YELLOW}partial{_RESET} ({reason}): {len(spans)} spans  "
            f"{_DIM}trace {trace_id:032x}{_RESET}"
        )
        return "\n".join([head, *self._rows(rows, origin)]) + "\n"

    def _reset(self) -> None:
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._traces = OrderedDict()
        self._buffered = 0
        self._printed = OrderedDict()
        self._flushed_traces = OrderedDict()


def _by_start(spans: list[ReadableSpan], *, reverse: bool = False) -> list[ReadableSpan]:
    return sorted(spans, key=lambda s: s.start_time or 0, reverse=reverse)


def _breakdown_from_attributes(attrs: Mapping[str, Any]) -> dict[str, float] | None:
    out: dict[str, float] = {}
    for band in A.ALL_BANDS:
        v = attrs.get(A.BREAKDOWN_PREFIX + band)
        if not isinstance(v, int | float):
            return None
        out[band] = float(v)
    for band in A.BANDS:
        v = attrs.get(A.BREAKDOWN_PREFIX + band + "_sum")
        if isinstance(v, int | float):
            out[band + "_sum"] = float(v)
    e2e = attrs.get(A.BREAKDOWN_E2E)
    out["e2e"] = float(e2e) if isinstance(e2e, int | float) else sum(out[b] for b in A.ALL_BANDS)
    return out


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _or_dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _strip_ansi(text: str) -> str:
    if "\x1b" not in text:
        return text
    for code in (_RESET, _BOLD, _DIM, _RED, _GREEN, _YELLOW, _BLUE, _MAGENTA, _CYAN):
        text = text.replace(code, "")
    return text
