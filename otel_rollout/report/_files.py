"""Trace files read line by line: OTLP JSON lines (or one pretty-printed ``.json`` document).

A line that is not JSON, or not trace JSON, is skipped with a warning naming the file and
line, and counted; reading goes on. Only a file that cannot be opened at all is an error.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from otel_rollout.report._documents import loss_records, parse_document
from otel_rollout.report._model import (
    LOSS_BAD_LINE,
    RawSpan,
    ReadResult,
    Row,
    TraceReadError,
    row_of,
)
from otel_rollout.report._otlp_typed import typed_rows, typed_spans

#: A ``.json`` file smaller than this is also tried as one document (Jaeger UI downloads).
_WHOLE_DOCUMENT_MAX_BYTES = 256 * 1024 * 1024

#: Read buffer: a trace file's lines are batches of hundreds of KB; the default 8 KiB
#: buffer reads each in many pieces and joins them (half the CPU of going through lines).
_BUFFER_BYTES = 1 << 20

Warn = Callable[[str], object]
T = TypeVar("T")


def _default_warn(message: str) -> None:
    warnings.warn(message, stacklevel=4)


def iter_file_spans(
    path: str | Path, result: ReadResult, warn: Warn | None = None
) -> Iterator[RawSpan]:
    """The spans of a trace file, one line at a time; bad lines are warned about, counted
    in ``result.losses`` and skipped. Raises :class:`TraceReadError` if it cannot be read."""
    for spans in _read(path, result, warn, typed_spans, list):
        yield from spans


def iter_file_rows(
    path: str | Path, result: ReadResult, warn: Warn | None = None
) -> Iterator[list[Row]]:
    """:func:`iter_file_spans` as the assembler takes it: a list of rows a line
    (:meth:`TraceAssembler.add_rows`), most lines decoded without a :class:`RawSpan`."""
    return _read(path, result, warn, typed_rows, _rows_of)


def _rows_of(spans: list[RawSpan]) -> list[Row]:
    return [row_of(s) for s in spans]


def _read(path: str | Path, result: ReadResult, warn: Warn | None,
          fast: Callable[[bytes], list[T] | None],
          general: Callable[[list[RawSpan]], list[T]]) -> Iterator[list[T]]:  # fmt: skip
    """A list a line: ``fast(line)``, else ``general`` of the general reader's spans."""
    path = Path(path)
    warn = warn or _default_warn
    try:
        f = path.open("rb", buffering=_BUFFER_BYTES)
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with f:
        try:
            if path.suffix == ".json" and path.stat().st_size < _WHOLE_DOCUMENT_MAX_BYTES:
                whole = _whole_document(f.read(), path)
                if whole is not None:
                    yield general(whole)
                    return
                f.seek(0)
            lineno = 0
            for raw in f:
                lineno += 1
                if not raw or raw.isspace():  # as ``not raw.strip()``, without a copy
                    continue
                got = fast(raw)
                if got is not None:  # the usual trace-file line, decoded the fast way
                    yield got
                    continue
                where = f"{path}:{lineno}"
                try:
                    doc = json.loads(raw)
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    why = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
                    _bad(result, warn, f"{where}: line skipped: invalid JSON ({why})")
                    continue
                except RecursionError:
                    _bad(result, warn, f"{where}: line skipped: JSON nested too deeply")
                    continue
                try:
                    spans = parse_document(doc, where)
                except TraceReadError as exc:
                    _bad(result, warn, f"{exc}; line skipped")
                    continue
                if not spans:  # perhaps the writer's loss record
                    for writer, counts in loss_records(doc):
                        result.note_export_losses(writer, counts)
                yield general(spans)
        except OSError as exc:
            raise TraceReadError(f"{path}: read failed: {exc.strerror or exc}") from None


def _whole_document(data: bytes, path: Path) -> list[RawSpan] | None:
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None  # JSON lines, read line by line
    return parse_document(doc, str(path))


def _bad(result: ReadResult, warn: Warn, message: str) -> None:
    result.lose(LOSS_BAD_LINE)
    if result.warn(message):
        warn(message)


def read_spans_file(path: str | Path, result: ReadResult | None = None) -> list[RawSpan]:
    """Every span of a trace file, as a list (:func:`iter_file_spans` streams)."""
    return list(iter_file_spans(path, result if result is not None else ReadResult()))
