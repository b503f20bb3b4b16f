"""The trace file: OTLP JSON lines, each written whole, rotated by size and by age.

Rotation opens ``traces-X_0001.jsonl``, ``_0002``... (names that sort in writing order). A
write that fails part way is cut back, so at most a last line is ever partial. Whenever the
pipeline's loss counts changed, a *loss record* (a line with a resource and no spans, the
counts as ``rollout.export.lost.<reason>``) is appended (docs/configure.md).
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import secrets
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_rollout import attributes as A
from otel_rollout._base.fork import reset_in_child
from otel_rollout._export.otlp_json import _attributes, dumps_line, encode_spans_line

_log = logging.getLogger("otel_rollout.export")

#: Defaults: a new file every 128 MiB or every hour, whichever comes first.
DEFAULT_MAX_BYTES = 128 * 1024 * 1024
DEFAULT_MAX_AGE_S = 3600.0


def loss_record(identity: Mapping[str, Any], losses: Mapping[str, int]) -> bytes:
    """One OTLP JSON line without spans: a resource with ``identity``'s attributes and the
    cumulative ``losses`` (reason -> spans) as ``rollout.export.lost.<reason>`` ints."""
    attrs = {k: v for k, v in identity.items() if v is not None}
    attrs |= {A.EXPORT_LOST_PREFIX + why: int(n) for why, n in losses.items()}
    doc = {"resourceSpans": [{"resource": {"attributes": _attributes(attrs)}, "scopeSpans": []}]}
    return dumps_line(doc)


def rotated_path(first: Path, index: int) -> Path:
    """The ``index``-th file after ``first`` (``traces-X.jsonl`` -> ``traces-X_0001.jsonl``)."""
    return first.with_name(f"{first.stem}_{index:04d}{first.suffix}") if index else first


class RotatingTraceFile(SpanExporter):
    """A span exporter writing OTLP JSON lines to ``path`` and the files after it.

    ``max_bytes`` / ``max_age_s``: start a new file before one would grow past this size,
    or once it is this old (``None`` or 0: never). ``paths`` lists the files written so far.
    """

    def __init__(self, path: str | os.PathLike[str], *, max_bytes: int | None = DEFAULT_MAX_BYTES,
                 max_age_s: float | None = DEFAULT_MAX_AGE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
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
        self._losses: Callable[[], Mapping[str, int]] | None = None
        self._resource: dict[str, Any] = {}
        self._writer_id = uuid.uuid4().hex
        self._written_losses: dict[str, int] = {}  # the counts of the last loss record
        self.paths: list[Path] = []
        self._open(self._first)
        reset_in_child(self, RotatingTraceFile._after_fork)

    def record_losses(
        self, losses: Callable[[], Mapping[str, int]], resource: Mapping[str, Any] | None = None
    ) -> None:
        """Append a loss record whenever ``losses()`` (the pipeline's cumulative losses by
        reason) changes, its resource ``resource`` (else the spans') plus this writer's id."""
        self._losses = losses
        if resource is not None:
            self._resource = dict(resource)

    @property
    def path(self) -> Path:
        return self.paths[-1] if self.paths else self._first

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
                self._resource = dict(spans[0].resource.attributes)
            try:
                self._append(data)
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

    def write_line(self, data: bytes) -> bool:
        """Append whole OTLP JSON lines of another signal (log records); False on failure."""
        with self._lock:
            if self._shutdown:
                return False
            try:
                self._append(data)
            except OSError:
                return False
        return True

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
        """A forked child writes files of its own (``traces-X-<pid>-<random>.jsonl``...)."""
        self._lock = threading.Lock()
        self._writer_id = uuid.uuid4().hex  # counts start again from zero in the child
        self._written_losses = {}
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        part = f"{os.getpid()}-{secrets.token_hex(2)}"  # a pid may be reused by a later child
        self._first = self._first.with_name(f"{self._first.stem}-{part}{self._first.suffix}")
        self._index = 0
        self.paths = []  # opened at the child's first write: one that never traces has none

    # --- internals (under the lock) -----------------------------------------------------------
    def _open(self, path: Path) -> int:
        # read as well: the last byte says whether the file ends in a partial line
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        size = os.fstat(fd).st_size
        self._fd, self._size, self._cut = fd, size, _ends_cut(fd, size)
        self._opened_at = self._clock()
        self.paths.append(path)
        return fd

    def _close(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            finally:
                self._fd = None

    def _append(self, data: bytes) -> None:
        """Write ``data`` whole, in a new file where this one is gone, full or old."""
        reopened = self._reopen_if_gone()
        if self._rotate_if_due(len(data)) or reopened:
            self._write_losses_if_changed(new_file=True)
        self._write_whole(data)

    def _write_losses_if_changed(self, *, new_file: bool = False) -> None:
        """A loss record if the losses changed (or, in a new file, if any). Never raises."""
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

    def _reopen_if_gone(self) -> bool:
        """Open the file again if it was deleted or moved away (a cleanup job, logrotate);
        True when a new file began."""
        if self._fd is None or not self.paths:
            return False
        try:
            here = os.stat(self.path)
            mine = os.fstat(self._fd)
            if (here.st_ino, here.st_dev) == (mine.st_ino, mine.st_dev):
                return False
        except FileNotFoundError:
            pass
        _log.warning("otel-rollout: the trace file %s was deleted or moved away; writing a "
                     "new one at the same path", self.path)  # fmt: skip
        self._close()
        path = self.paths.pop()
        self._open(path)
        return True

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
        """Append ``data``; a write that fails part way is cut back to where it began.
        Under an exclusive ``flock``, from the file's own size: what another writer
        appended is never cut, nor glued to a partial line."""
        fd = self._fd if self._fd is not None else self._open(self.path)
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


@contextlib.contextmanager
def _exclusive(fd: int) -> Iterator[None]:
    """An exclusive ``flock`` on ``fd``; none where the file system has none (the
    per-process file names keep writers apart there)."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
    except OSError:
        yield
        return
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_UN)
