"""What a dead or mistyped OTLP endpoint fails goes to a local trace file instead.

While the endpoint keeps failing, batches go straight to the file (each OTLP try waits out
its timeout, which would fill the export queue) and the endpoint is tried again every
``retry_s``. The file is created at the first failure only.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

_log = logging.getLogger("otel_rollout.export")

#: Seconds between two tries of an endpoint that failed (batches go to the file meanwhile).
RETRY_S = 30.0


class SpillExporter(SpanExporter):
    """Export to ``primary``; what it fails, and what ends while it is failing, goes to the
    exporter ``open_local()`` returns (made at the first failure). ``spilled`` counts the
    spans written there; ``local`` is that exporter (None until then)."""

    def __init__(self, primary: SpanExporter, open_local: Callable[[], SpanExporter], *,
                 target: str = "the trace endpoint", retry_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.primary = primary
        self._open_local = open_local
        self.target = target
        self._retry_s = RETRY_S if retry_s is None else retry_s
        self._clock = clock
        self._lock = threading.Lock()
        self._retry_at: float | None = None  # failing: the endpoint is tried again then
        self.local: SpanExporter | None = None
        self.spilled = 0
        self._spilled_in_outage = 0

    @property
    def path(self) -> Path | None:
        return getattr(self.local, "path", None)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        retry_at = self._retry_at
        if retry_at is None or self._clock() >= retry_at:
            try:
                result = self.primary.export(spans)
            except Exception:
                result = SpanExportResult.FAILURE
            if result is SpanExportResult.SUCCESS:
                if retry_at is not None:
                    self._retry_at = None
                    _log.warning("otel-rollout: trace export to %s resumed; %d spans were "
                                 "written to %s meanwhile", self.target,
                                 self._spilled_in_outage, self.path)  # fmt: skip
                    self._spilled_in_outage = 0
                return result
            self._retry_at = self._clock() + self._retry_s
        return self._spill(spans, first=retry_at is None)

    def _spill(self, spans: Sequence[ReadableSpan], *, first: bool) -> SpanExportResult:
        try:
            with self._lock:
                if self.local is None:
                    self.local = self._open_local()
            result = self.local.export(spans)
        except Exception as exc:
            _log.debug("otel-rollout: spilling to the local trace file failed: %r", exc)
            return SpanExportResult.FAILURE
        if result is SpanExportResult.SUCCESS:
            self.spilled += len(spans)
            self._spilled_in_outage += len(spans)
            if first:
                _log.warning("otel-rollout: trace export to %s failed; spans go to the local "
                             "trace file %s until it answers again (tried every %.0f s)",
                             self.target, self.path, self._retry_s)  # fmt: skip
        return result

    def shutdown(self) -> None:
        for exporter in (self.primary, self.local):
            if exporter is not None:
                exporter.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return all([bool(e.force_flush(timeout_millis)) for e in (self.primary, self.local) if e])
