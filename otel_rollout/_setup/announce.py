"""The one line ``configure()`` says on stderr: where traces and metrics go, how to watch.

Said once per process, by the global ``configure()`` only (a ``local=True`` setup is an
embedding or a test), not in Ray workers (the driver says it, not each of its workers),
and never when ``OTEL_ROLLOUT_ANNOUNCE=false``. A run without it
leaves users guessing where the trace file went and that ``otel-rollout top`` exists.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any, TextIO

_said = False
_lock = threading.Lock()


def announce_text(settings: Any, trace_file: Path | None) -> str:
    """The lines to say for ``settings`` (resolved) and the trace file, if any."""
    t = settings.traces_exporter
    if t == "file" and trace_file is not None:
        traces = f"traces -> {trace_file}"
        watch = f"otel-rollout top {trace_file.parent}"
    elif t == "otlp":
        traces = f"traces -> OTLP {settings.endpoint_for('traces')} ({settings.traces_protocol})"
        watch = "otel-rollout top --listen PORT, with the traces sent there"
    else:
        traces, watch = f"traces -> {t}", None
    m = settings.metrics_exporter
    if m == "otlp":
        metrics = f"OTLP {settings.endpoint_for('metrics')}"
    elif m == "prometheus":
        metrics = f"Prometheus http://{settings.prometheus_host}:{settings.prometheus_port}/metrics"
    else:
        metrics = m
    lines = [f"otel-rollout: run {settings.run_id}: {traces}; metrics -> {metrics}"]
    if watch is not None:
        lines.append(f"otel-rollout: watch it live: {watch}")
    lines.append("otel-rollout: (OTEL_ROLLOUT_ANNOUNCE=false silences these lines)")
    return "\n".join(lines) + "\n"


def announce(settings: Any, trace_file: Path | None, stream: TextIO | None = None) -> bool:
    """Say :func:`announce_text` on stderr, the first time in this process; True if said."""
    global _said
    if not settings.announce or settings.disabled:
        return False
    if "ray.worker.id" in (settings.resource_attributes or {}):
        return False  # a Ray worker (the setup hook's configure()): the driver said it
    with _lock:
        if _said:
            return False
        _said = True
    try:
        (stream or sys.stderr).write(announce_text(settings, trace_file))
    except Exception:  # a closed stderr must not stop the run
        return False
    return True
