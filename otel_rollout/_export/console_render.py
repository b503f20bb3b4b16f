"""The console exporter's text: one indented tree per trajectory, with its breakdown.

Text is always rendered with colour codes; :func:`strip_ansi` removes them at write time
when colour is off. The renderer remembers where recent spans were printed, so a span
ending after its tree printed shows as one ``late`` line under the right label.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from otel_rollout import attributes as A
from otel_rollout._accounting.compute import root_labels
from otel_rollout._accounting.span_tree import SpanRecord, breakdown_from_tree
from otel_rollout._base.spanbuffer import TraceSpans

#: Printed roots (and spans flushed early) remembered, so a span ending after its
#: trajectory was printed shows as one "late" line instead of waiting in the buffer.
MAX_REMEMBERED = 4096
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
_PHASE_COLORS = MappingProxyType(
    {
        A.PHASE_LLM: _CYAN,
        A.PHASE_ENV: _YELLOW,
        A.PHASE_ENV_SETUP: _MAGENTA,
        A.PHASE_ENV_TEARDOWN: _MAGENTA,
        A.BAND_OTHER: _BLUE,
    }
)
_STATUS_COLORS = MappingProxyType(
    {A.STATUS_OK: _GREEN, A.STATUS_ERROR: _RED, A.STATUS_CANCELLED: _YELLOW}
)


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


class TreeRenderer:
    """Renders trees, partial trees and late lines; remembers what it printed where."""

    def __init__(self, bands: Mapping[str, str] | None = None) -> None:
        self._bands = dict(bands) if bands else None
        # span id -> (start ns of the tree it printed in, depth, label of that tree)
        self.printed: OrderedDict[int, tuple[int, int, str]] = OrderedDict()
        #: traces printed early as partial trees (their root prints a note when it comes)
        self.flushed_traces: OrderedDict[int, bool] = OrderedDict()

    def remember(self, sid: int, start: int, depth: int, label: str) -> None:
        self.printed[sid] = (start, depth, label)
        if len(self.printed) > MAX_REMEMBERED:
            self.printed.popitem(last=False)

    def mark_flushed(self, trace_id: int) -> None:
        self.flushed_traces[trace_id] = True
        if len(self.flushed_traces) > MAX_REMEMBERED:
            self.flushed_traces.popitem(last=False)

    @staticmethod
    def label(span: ReadableSpan) -> str:
        attrs = span.attributes or {}
        tid = attrs.get(A.TRAJECTORY_ID)
        return f"trajectory {tid}" if tid is not None else span.name

    def render_root(
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

    def render_late(self, span: ReadableSpan, origin: int, depth: int, label: str) -> str:
        line = self._span_line(span, depth, origin, 2 * depth + len(span.name))
        return f"{_YELLOW}late{_RESET} ({label}, ended after it was printed): {line.lstrip()}\n"

    def render_partial(self, trace_id: int, buf: TraceSpans, reason: str) -> str:
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
            self.remember(span.context.span_id, origin, depth, f"trace {trace_id:032x}")
            kids = children.get(span.context.span_id, [])
            stack.extend((depth + 1, c) for c in _by_start(kids, reverse=True))
        head = (
            f"{_YELLOW}partial{_RESET} ({reason}): {len(spans)} spans  "
            f"{_DIM}trace {trace_id:032x}{_RESET}"
        )
        return "\n".join([head, *self._rows(rows, origin)]) + "\n"


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


def strip_ansi(text: str) -> str:
    if "\x1b" not in text:
        return text
    for code in (_RESET, _BOLD, _DIM, _RED, _GREEN, _YELLOW, _BLUE, _MAGENTA, _CYAN):
        text = text.replace(code, "")
    return text
