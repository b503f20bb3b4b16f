"""The console tree's text (the console exporter's, and ``top``'s span tree): always with
colour codes, which :func:`strip_ansi` removes at write time when colour is off."""

from __future__ import annotations

import os
import re
from collections import OrderedDict
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import StatusCode

from otel_rollout import attributes as A
from otel_rollout._accounting.compute import root_labels
from otel_rollout._accounting.span_tree import SpanRecord, breakdown_from_tree
from otel_rollout._bands import DEFAULT_BANDS

#: Printed spans (and traces flushed early) remembered for late lines.
MAX_REMEMBERED = 4096
_NAME_WIDTH_MAX = 48
_RESET, _BOLD, _DIM = "\x1b[0m", "\x1b[1m", "\x1b[2m"
_RED, _GREEN, _YELLOW = "\x1b[31m", "\x1b[32m", "\x1b[33m"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
#: Each band's colour (the registry's); a phase that is not a band takes ``other``'s.
_PHASE_COLORS = MappingProxyType({band.name: band.ansi for band in DEFAULT_BANDS})
_OTHER_COLOR = DEFAULT_BANDS[DEFAULT_BANDS.remainder].ansi
_STATUS_COLORS = MappingProxyType(
    {A.STATUS_OK: _GREEN, A.STATUS_ERROR: _RED, A.STATUS_CANCELLED: _YELLOW}
)


def format_duration(seconds: float) -> str:
    """A short human duration: ``850us``, ``12.3ms``, ``1.234s``, ``4m05.2s``, ``1h02m``."""
    seconds = max(0.0, seconds)
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
    try:
        return bool(stream.isatty())
    except Exception:
        return False


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _ns(ns: int) -> str:
    return format_duration(ns * 1e-9)


def _remember(d: OrderedDict[int, Any], key: int, value: Any) -> None:
    d[key] = value
    if len(d) > MAX_REMEMBERED:
        d.popitem(last=False)


def _depth_first(spans: list[ReadableSpan]) -> list[tuple[int, ReadableSpan]]:
    """(depth, span) in tree order, siblings by start; a span whose parent is not among
    ``spans`` is at depth 1."""
    ids = {s.context.span_id for s in spans}
    kids: dict[int | None, list[ReadableSpan]] = {}
    for s in sorted(spans, key=lambda s: s.start_time or 0, reverse=True):
        parent = s.parent.span_id if s.parent and s.parent.span_id in ids else None
        kids.setdefault(parent, []).append(s)
    rows, stack = [], [(1, s) for s in kids.get(None, [])]
    while stack:
        depth, span = stack.pop()
        rows.append((depth, span))
        stack.extend((depth + 1, c) for c in kids.get(span.context.span_id, []))
    return rows


class TreeRenderer:
    """Renders trees, partial trees and late lines; remembers what it printed where."""

    def __init__(self, bands: Mapping[str, str] | None = None) -> None:
        self._bands = dict(bands) if bands else None
        #: span id -> (start ns of the tree it printed in, its depth, that tree's label)
        self.printed: OrderedDict[int, tuple[int, int, str]] = OrderedDict()
        #: traces printed early as partial trees (their root says so when it comes)
        self.flushed: OrderedDict[int, bool] = OrderedDict()

    def remember(self, span_id: int, origin: int, depth: int, label: str) -> None:
        _remember(self.printed, span_id, (origin, depth, label))

    def mark_flushed(self, trace_id: int) -> None:
        _remember(self.flushed, trace_id, True)

    @staticmethod
    def label(span: ReadableSpan) -> str:
        tid = (span.attributes or {}).get(A.TRAJECTORY_ID)
        return f"trajectory {tid}" if tid is not None else span.name

    def render_root(self, root: ReadableSpan, descendants: list[ReadableSpan],
                    is_trajectory: bool, earlier: bool) -> str:  # fmt: skip
        attrs = root.attributes or {}
        start = root.start_time or 0
        e2e = (root.end_time or start) - start
        error = root.status.status_code is StatusCode.ERROR
        trace = f"{_DIM}trace {root.context.trace_id:032x}{_RESET}"
        if is_trajectory:
            status, env_class = root_labels(attrs, error)[:2]
            parts = [f"{_BOLD}trajectory{_RESET}",
                     *([f"{_BOLD}{env_class}{_RESET}"] if env_class is not None else []),
                     str(attrs.get(A.TRAJECTORY_ID)),
                     f"{_STATUS_COLORS.get(status, _RED)}{status}{_RESET}",
                     f"e2e {_BOLD}{_ns(e2e)}{_RESET}"]  # fmt: skip
            for label, key in (("reward", A.REWARD), ("turns", A.TURNS),
                               ("model", A.GEN_AI_REQUEST_MODEL)):  # fmt: skip
                if (v := attrs.get(key)) is not None:
                    parts.append(f"{label} {v:g}" if isinstance(v, float) else f"{label} {v}")
            if (err := attrs.get(A.ERROR_TYPE)) is not None:
                parts.append(f"{_RED}{err}{_RESET}")
            lines = ["  ".join([*parts, trace])]
        else:
            lines = [f"{_BOLD}{root.name}{_RESET}  {_ns(e2e)}"
                     + (f"  {_RED}ERROR{_RESET}" if error else "") + f"  {trace}"]  # fmt: skip
        if earlier:
            lines.append(f"  {_DIM}(earlier spans of this trace printed above: buffer full)"
                         f"{_RESET}")  # fmt: skip
        lines += self._rows(_depth_first(descendants), start)
        if is_trajectory:
            lines.append(self._breakdown_line(root, descendants))
        return "\n".join(lines) + "\n"

    def render_late(self, span: ReadableSpan, origin: int, parent_depth: int, label: str) -> str:
        """A span that ended after its tree printed, one line (remembered for its own)."""
        self.remember(span.context.span_id, origin, parent_depth + 1, label)
        line = self._span_line(span, parent_depth + 1, origin, 0).lstrip()
        return f"{_YELLOW}late{_RESET} ({label}, ended after it was printed): {line}\n"

    def render_partial(self, trace_id: int, spans: list[ReadableSpan], reason: str) -> str:
        origin = min((s.start_time or 0 for s in spans), default=0)
        rows = _depth_first(spans)
        for depth, span in rows:
            self.remember(span.context.span_id, origin, depth, f"trace {trace_id:032x}")
        head = (f"{_YELLOW}partial{_RESET} ({reason}): {len(spans)} spans  "
                f"{_DIM}trace {trace_id:032x}{_RESET}")  # fmt: skip
        return "\n".join([head, *self._rows(rows, origin)]) + "\n"

    def _rows(self, rows: list[tuple[int, ReadableSpan]], origin: int) -> list[str]:
        width = min(_NAME_WIDTH_MAX, max((2 * d + len(s.name) for d, s in rows), default=0))
        return [self._span_line(span, depth, origin, width) for depth, span in rows]

    def _span_line(self, span: ReadableSpan, depth: int, origin: int, width: int) -> str:
        attrs = span.attributes or {}
        start = span.start_time or origin
        phase = attrs.get(A.PHASE)
        tag = f"[{phase}]" if phase is not None else ""
        color = _PHASE_COLORS.get(str(phase), _OTHER_COLOR)
        line = (("  " * depth + span.name).ljust(width) + "  "
                + (f"{color}{tag}{_RESET}" if tag else "") + " " * max(0, 15 - len(tag))
                + f"{_DIM}{'+' + _ns(start - origin):>9}{_RESET}  "
                + f"{_ns((span.end_time or start) - start):>9}")  # fmt: skip
        extras = []
        if (turn := attrs.get(A.TURN)) is not None:
            extras.append(f"turn {turn}")
        tin, tout = attrs.get(A.GEN_AI_USAGE_INPUT_TOKENS), attrs.get(A.GEN_AI_USAGE_OUTPUT_TOKENS)
        if tin is not None or tout is not None:
            extras.append(f"tokens in={'-' if tin is None else tin} "
                          f"out={'-' if tout is None else tout}")  # fmt: skip
        if reasons := attrs.get(A.GEN_AI_RESPONSE_FINISH_REASONS):
            text = ",".join(map(str, reasons)) if isinstance(reasons, list | tuple) else reasons
            extras.append(f"finish {text}")
        if span.status.status_code is StatusCode.ERROR:
            extras.append(f"{_RED}ERROR {attrs.get(A.ERROR_TYPE, '')}".rstrip() + _RESET)
        return (line + "".join("  " + e for e in extras)).rstrip()

    def _breakdown_line(self, root: ReadableSpan, descendants: list[ReadableSpan]) -> str:
        attrs = root.attributes or {}
        values = _breakdown_from_attributes(attrs)
        note = ""
        if values is None:  # a root ended by plain SDK code: no breakdown attributes
            bd, _ = breakdown_from_tree(
                SpanRecord.from_span(root), [SpanRecord.from_span(s) for s in descendants],
                attrs, error=root.status.status_code is StatusCode.ERROR, bands=self._bands,
            )  # fmt: skip
            values = {"e2e": bd.e2e, **bd.seconds}
            values.update({b + "_sum": bd.band_sum(b) for b in bd.bands.phased})
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


def _breakdown_from_attributes(attrs: Mapping[str, Any]) -> dict[str, float] | None:
    """The processor's ``rollout.breakdown.*`` figures, or None if a band is missing."""
    out: dict[str, float] = {}
    for key in (*A.ALL_BANDS, *(b + "_sum" for b in A.BANDS)):
        v = attrs.get(A.BREAKDOWN_PREFIX + key)
        if isinstance(v, int | float):
            out[key] = float(v)
        elif key in A.ALL_BANDS:
            return None
    e2e = attrs.get(A.BREAKDOWN_E2E)
    out["e2e"] = float(e2e) if isinstance(e2e, int | float) else sum(out[b] for b in A.ALL_BANDS)
    return out
