"""The trace file: OTLP JSON lines, each line written whole, rotated by size and by age.

One line per exported batch, in the format of the official OTLP JSON file exporter (what
``otel-rollout report`` and Jaeger's upload read). A line goes to the file in one piece:
if a write fails part way (a full disk), the file is cut back to where the line began,
so a failure or a crash leaves at most one truncated last line, never a partial line in
the middle. A file that would grow past ``max_bytes``, or that is older than
``max_age_s``, is closed and the next batch opens a new one: ``traces-X.jsonl``, then
``traces-X_0001.jsonl``, ``traces-X_0002.jsonl``..., names that sort in writing order, so
``otel-rollout report 'traces-X*.jsonl'`` reads them as one stream.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

_log = logging.getLogger("otel_rollout.export")

#: Defaults: a new file every 128 MiB or every hour, whichever comes first.
DEFAULT_MAX_BYTES = 128 * 1024 * 1024
DEFAULT_MAX_AGE_S = 3600.0


def _encode(spans: Sequence[ReadableSpan]) -> bytes | None:
    from opentelemetry.exporter.otlp.json.common.trace_encoder import encode_spans

    data = encode_spans(spans)
    if not data.resource_spans:
        return None
    return (json.dumps(data.to_dict(), separators=(",", ":")) + "\n").encode("utf-8")


def rotated_path(first: Path, index: int) -> Path:
    """The ``index``-th file after ``first`` (``traces-X.jsonl`` -> ``traces-X_0001.jsonl``)."""
    if index == 0:
        return first
    return first.with_name(f"{first.stem}_{index:04d}{first.suffix}")


class RotatingTraceFile(SpanExporter):
    """A span exporter writing OTLP JSON lines to ``path`` and the files after it.

    ``max_bytes`` / ``max_age_s``: start a new file before one would grow past this size,
    or once it is this old (``None`` or 0: never for that reason). A single batch larger
    than ``max_bytes`` is still written, alone in its file. ``clock`` (seconds, monotonic)
    can be injected for tests. ``paths`` lists the files written so far.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
        max_age_s: float | None = DEFAULT_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_bytes is not None and (isinstance(max_bytes, bool) or max_bytes < 0):
            raise ValueError(f"max_bytes must be a size in bytes >= 0, got {max_bytes!r}")
        if max_age_s is not None and not max_age_s >= 0:
            raise ValueError(f"max_age_s must be seconds >= 0, got {max_age_s!r}")
        self._first = Path(path)
        self._max_bytes = max_bytes or None
        self._max_age = max_age_s or None
        self._clock = clock
        self._lock = threading.Lock()
        self._fd: int | None = None
        self._size = 0
        self._opened_at = 0.0
        self._index = 0
        self._cut = False  # the file ends in a partial line: start the next with a newline
        self._shutdown = False
        self._failing = False
        self.paths: list[Path] = []
        self._open(self._first)
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (e := ref()) and e._after_fork())

    @property
    def path(self) -> Path:
        """The file being written."""
        return self.paths[-1] if self.paths else self._first

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            data = _encode(spans)
        except Exception as exc:  # an attribute the encoder cannot take
            _log.warning("otel-rollout: cannot encode %d spans for the trace file: %r",
                         len(spans), exc)  # fmt: skip
            return SpanExportResult.FAILURE
        if data is None:
            return SpanExportResult.SUCCESS
        with self._lock:
            if self._shutdown:
                return SpanExportResult.FAILURE
            try:
                self._rotate_if_due(len(data))
                self._write_whole(data)
            except OSError as exc:
                if not self._failing:
                    self._failing = True
                    _log.warning("otel-rollout: cannot write the trace file %s (%s); batches "
                                 "are dropped and counted until it can (logged once)",
                                 self.path, exc.strerror or exc)  # fmt: skip
                return SpanExportResult.FAILURE
            if self._failing:
                self._failing = False
                _log.warning("otel-rollout: writing the trace file again: %s", self.path)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        with self._lock:
            if self._shutdown:
                return
            self._shutdown = True
            self._close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every line is handed to the OS as it is exported

    def _after_fork(self) -> None:
        """A forked child writes files of its own (``traces-X-<pid>.jsonl``...), so two
        processes never append to, rotate or cut back the same file."""
        self._lock = threading.Lock()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._first = self._first.with_name(f"{self._first.stem}-{os.getpid()}{self._first.suffix}")
        self._index = 0
        self.paths = []  # opened at the child's first write: a child that never traces
        # leaves no file

    # --- internals (under the lock) -----------------------------------------------------------
    def _open(self, path: Path) -> None:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        cut = False
        if size:  # appending to a file a crash may have left with a partial last line
            with open(path, "rb") as f:
                f.seek(size - 1)
                cut = f.read(1) != b"\n"
        self._fd, self._size, self._cut = fd, size, cut
        self._opened_at = self._clock()
        self.paths.append(path)

    def _close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None

    def _rotate_if_due(self, incoming: int) -> None:
        if not self.paths:  # a forked child's first write
            self._open(self._first)
            return
        if self._fd is not None and self._size == 0:
            return  # an empty file takes any batch
        too_big = self._max_bytes is not None and self._size + incoming > self._max_bytes
        too_old = self._max_age is not None and self._clock() - self._opened_at >= self._max_age
        if self._fd is not None and not too_big and not too_old:
            return
        self._close()
        while True:
            self._index += 1
            path = rotated_path(self._first, self._index)
            if not path.exists():
                break
        self._open(path)

    def _write_whole(self, data: bytes) -> None:
        if self._fd is None:
            self._open(self.path)
        fd = self._fd
        if self._cut:
            data = b"\n" + data
        start = self._size
        written = 0
        try:
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError:
            if written:
                try:  # no partial line stays in the file
                    os.ftruncate(fd, start)
                except OSError:
                    self._size = start + written
                    self._cut = True
            raise
        self._size = start + written
        self._cut = False
