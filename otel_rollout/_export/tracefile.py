"""The trace file: OTLP JSON lines, each line written whole, rotated by size and by age.

One line per exported batch, in the format of the official OTLP JSON file exporter (what
``otel-rollout report`` and Jaeger's upload read), encoded by :mod:`.otlp_json`. A line
goes to the file in one piece: if a write fails part way (a full disk), the file is cut
back to where the line began, so a failure or a crash leaves at most one truncated last
line, never a partial line in the middle. A file that would grow past ``max_bytes``, or
that is older than ``max_age_s``, is closed and the next batch opens a new one:
``traces-X.jsonl``, then ``traces-X_0001.jsonl``, ``traces-X_0002.jsonl``..., names that
sort in writing order, so ``otel-rollout report 'traces-X*.jsonl'`` reads them as one
stream.

Spans lost before they reach the file (a full export queue, a failed write...) are stated
in the file too: whenever the export pipeline's cumulative loss counts changed since the
last one was written, the writer appends a *loss record*, an ordinary OTLP JSON line whose
resource carries the writer's identity and the counts (``rollout.export.lost.<reason>``)
and which holds no spans. It is checked at each export, at each new file, at flush and at
shutdown; ``otel-rollout report`` keeps each writer's latest counts.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_rollout import attributes as A
from otel_rollout._export.otlp_compact import compact_span, source_of
from otel_rollout._export.otlp_json import dumps_line, encode_spans_line

_log = logging.getLogger("otel_rollout.export")

#: Defaults: a new file every 128 MiB or every hour, whichever comes first.
DEFAULT_MAX_BYTES = 128 * 1024 * 1024
DEFAULT_MAX_AGE_S = 3600.0


def _attribute(key: str, value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        v: dict[str, Any] = {"boolValue": value}
    elif isinstance(value, int):
        v = {"intValue": str(value)}  # int64 as a string, as the OTLP JSON encoder writes
    elif isinstance(value, float):
        v = {"doubleValue": value}
    else:
        v = {"stringValue": str(value)}
    return {"key": key, "value": v}


def loss_record(identity: Mapping[str, Any], losses: Mapping[str, int]) -> bytes:
    """One OTLP JSON line without spans: a resource with ``identity``'s attributes and the
    cumulative ``losses`` (reason -> spans) as ``rollout.export.lost.<reason>`` ints."""
    attrs = [_attribute(k, v) for k, v in identity.items() if v is not None]
    attrs += [_attribute(A.EXPORT_LOST_PREFIX + why, int(n)) for why, n in losses.items()]
    doc = {"resourceSpans": [{"resource": {"attributes": attrs}, "scopeSpans": []}]}
    return dumps_line(doc)


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

    ``losses``: a callable answering the export pipeline's cumulative losses by reason
    (``ExportStats.losses()``); when its answer changed since it was last written, a loss
    record (:func:`loss_record`) is appended, its resource being ``resource`` (the spans'
    resource attributes) plus this writer's id. Also settable later with
    :meth:`record_losses`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        max_bytes: int | None = DEFAULT_MAX_BYTES,
        max_age_s: float | None = DEFAULT_MAX_AGE_S,
        clock: Callable[[], float] = time.monotonic,
        losses: Callable[[], Mapping[str, int]] | None = None,
        resource: Mapping[str, Any] | None = None,
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
        self._losses = losses
        self._resource = dict(resource or {})
        self._writer_id = uuid.uuid4().hex
        self._written_losses: dict[str, int] = {}  # the counts of the last loss record
        self.paths: list[Path] = []
        self._open(self._first)
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: (e := ref()) and e._after_fork())

    def record_losses(
        self, losses: Callable[[], Mapping[str, int]], resource: Mapping[str, Any] | None = None
    ) -> None:
        """Write loss records from ``losses()`` (see the class); ``resource``: identity."""
        self._losses = losses
        if resource is not None:
            self._resource = dict(resource)

    @property
    def path(self) -> Path:
        """The file being written."""
        return self.paths[-1] if self.paths else self._first

    #: Its export queue may hold compact records of spans instead (see ``guarded``).
    compact = staticmethod(compact_span)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            data = encode_spans_line(spans)
        except Exception as exc:  # an attribute the encoder cannot take
            _log.warning("otel-rollout: cannot encode %d spans for the trace file: %r",
                         len(spans), exc)  # fmt: skip
            return SpanExportResult.FAILURE
        with self._lock:
            if self._shutdown:
                return SpanExportResult.FAILURE
            if data is None:
                self._write_losses_if_changed()
                return SpanExportResult.SUCCESS
            if not self._resource and spans:
                self._resource = dict(source_of(spans[0])[0].attributes)
            try:
                if self._rotate_if_due(len(data)):
                    self._write_losses_if_changed(new_file=True)
                self._write_whole(data)
                self._write_losses_if_changed()
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
            self._write_losses_if_changed()
            self._close()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        # every line is handed to the OS as it is exported; losses since then are stated
        with self._lock:
            if not self._shutdown:
                self._write_losses_if_changed()
        return True

    def _after_fork(self) -> None:
        """A forked child writes files of its own (``traces-X-<pid>-<random>.jsonl``...), so two
        processes never append to, rotate or cut back the same file."""
        self._lock = threading.Lock()
        self._writer_id = uuid.uuid4().hex  # counts start again from zero in the child
        self._written_losses = {}
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        part = f"{os.getpid()}-{secrets.token_hex(2)}"  # a pid may be reused by a later child
        self._first = self._first.with_name(f"{self._first.stem}-{part}{self._first.suffix}")
        self._index = 0
        self.paths = []  # opened at the child's first write: a child that never traces
        # leaves no file

    # --- internals (under the lock) -----------------------------------------------------------
    def _open(self, path: Path) -> None:
        # read as well: the last byte says whether the file ends in a partial line
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        self._fd, self._size, self._cut = fd, size, _ends_cut(fd, size)
        self._opened_at = self._clock()
        self.paths.append(path)

    def _close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None

    def _write_losses_if_changed(self, *, new_file: bool = False) -> None:
        """Append a loss record if the losses changed since the last one (or, in a new
        file, if there are any: each file then states them). Never raises."""
        if self._losses is None:
            return
        try:
            losses = {why: int(n) for why, n in self._losses().items()}
            if losses == self._written_losses and not (new_file and any(losses.values())):
                return
            if not any(losses.values()) and not self._written_losses:
                return
            identity = {**self._resource, "process.pid": os.getpid(),
                        A.EXPORT_WRITER_ID: self._writer_id}  # fmt: skip
            line = loss_record(identity, losses)
            if not self.paths:  # a forked child that has written nothing yet
                self._rotate_if_due(len(line))
            self._write_whole(line)
            self._written_losses = losses
        except Exception as exc:  # the next check tries again
            _log.debug("otel-rollout: loss record not written: %r", exc)

    def _rotate_if_due(self, incoming: int) -> bool:
        """Open the next file if this one is full or old; True when a new file began."""
        if not self.paths:  # a forked child's first write
            self._open(self._first)
            return True
        if self._fd is not None and self._size == 0:
            return False  # an empty file takes any batch
        too_big = self._max_bytes is not None and self._size + incoming > self._max_bytes
        too_old = self._max_age is not None and self._clock() - self._opened_at >= self._max_age
        if self._fd is not None and not too_big and not too_old:
            return False
        self._close()
        while True:
            self._index += 1
            path = rotated_path(self._first, self._index)
            if not path.exists():
                break
        self._open(path)
        return True

    def _write_whole(self, data: bytes) -> None:
        """Append ``data`` as whole lines; a write that fails part way is cut back to where
        it began. Under an exclusive lock on the file, with the start read from the file
        itself: bytes another writer appended (a user's second exporter on the same path)
        are never cut, nor glued to a partial line."""
        if self._fd is None:
            self._open(self.path)
        fd = self._fd
        with _exclusive(fd):
            start = os.fstat(fd).st_size
            if start != self._size:  # someone else appended since our last write
                self._cut = _ends_cut(fd, start)
            if self._cut:
                data = b"\n" + data
            written = 0
            try:
                while written < len(data):
                    written += os.write(fd, data[written:])
            except OSError:
                self._size = start
                if written:
                    try:  # no partial line stays in the file
                        os.ftruncate(fd, start)
                    except OSError:
                        self._size = start + written
                        self._cut = True
                raise
            self._size = start + written
            self._cut = False


def _ends_cut(fd: int, size: int) -> bool:
    """Whether the file of ``fd``, ``size`` bytes long, ends in a partial line."""
    if not size:
        return False
    try:
        return os.pread(fd, 1, size - 1) != b"\n"
    except OSError:
        return True  # unreadable: a newline first costs one empty line at most


class _exclusive:
    """An exclusive ``flock`` on ``fd`` for a block; a no-op where the file system or the
    platform has none (the per-process file names keep writers apart there)."""

    __slots__ = ("_fd", "_held")

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._held = False

    def __enter__(self) -> None:
        if _fcntl is not None:
            with contextlib.suppress(OSError):
                _fcntl.flock(self._fd, _fcntl.LOCK_EX)
                self._held = True

    def __exit__(self, *exc: object) -> None:
        if self._held:
            with contextlib.suppress(OSError):
                _fcntl.flock(self._fd, _fcntl.LOCK_UN)


try:
    import fcntl as _fcntl
except ImportError:  # pragma: no cover - Windows
    _fcntl = None  # type: ignore[assignment]
