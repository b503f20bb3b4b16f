"""Trace files read line by line (or one pretty-printed ``.json`` document): a bad line is
skipped, warned about and counted; most lines go the fast way (:mod:`._otlp_typed`)."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, TypeVar

from otel_rollout.report._documents import loss_records, parse_document
from otel_rollout.report._model import (
    LOSS_BAD_LINE,
    RawSpan,
    ReadResult,
    Row,
    TraceReadError,
    row_of,
)
from otel_rollout.report._otlp_typed import typed_rows

#: A ``.json`` file smaller than this is also tried as one document (Jaeger UI downloads).
_WHOLE_DOCUMENT_MAX_BYTES = 256 * 1024 * 1024
#: Read at once: lines are handed on as views into these chunks (copying each line out
#: costs as much as a fifth of the decoding).
_BUFFER_BYTES = 4 << 20
#: The bytes ``bytes.isspace`` takes for white space: a line starting otherwise is not blank.
_SPACE = frozenset(b" \t\n\r\x0b\x0c")

Warn = Callable[[str], object]
T = TypeVar("T")


def _default_warn(message: str) -> None:
    warnings.warn(message, stacklevel=4)


def iter_file_rows(
    path: str | Path, result: ReadResult, warn: Warn | None = None
) -> Iterator[list[Row]]:
    """A list of :data:`Row` s a line; bad lines are warned about, counted in
    ``result.losses`` and skipped. Raises :class:`TraceReadError` if it cannot be read."""
    return _read(path, result, warn, typed_rows, lambda spans: [row_of(s) for s in spans])


def read_spans_file(path: str | Path, result: ReadResult | None = None) -> list[RawSpan]:
    """Every span of a trace file, as the general reader has them."""
    lines = _read(path, result or ReadResult(), None, lambda line: None, list)
    return [span for spans in lines for span in spans]


def _read(path: str | Path, result: ReadResult, warn: Warn | None,
          fast: Callable[[bytes | memoryview], list[T] | None],
          general: Callable[[list[RawSpan]], list[T]]) -> Iterator[list[T]]:  # fmt: skip
    """A list a line: ``fast(line)``, else ``general`` of the general reader's spans."""
    path = Path(path)
    warn = warn or _default_warn
    try:
        f = path.open("rb", buffering=0)
    except OSError as exc:
        raise TraceReadError(f"{path}: cannot read: {exc.strerror or exc}") from None
    with f:
        try:
            if path.suffix == ".json" and path.stat().st_size < _WHOLE_DOCUMENT_MAX_BYTES:
                try:
                    doc = json.loads(f.read())
                except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                    f.seek(0)  # JSON lines, read line by line
                else:
                    yield general(parse_document(doc, str(path)))
                    return
            for lineno, raw in enumerate(_lines(f), 1):
                if not raw or (raw[0] in _SPACE and bytes(raw).isspace()):  # a blank line
                    continue
                got = fast(raw)
                if got is not None:
                    yield got
                    continue
                where = f"{path}:{lineno}"
                try:
                    doc = json.loads(bytes(raw))
                    spans = parse_document(doc, where, result.lose)
                except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                    why = exc.msg if isinstance(exc, json.JSONDecodeError) else "not UTF-8"
                    _bad(result, warn, f"{where}: line skipped: invalid JSON ({why})")
                    continue
                except RecursionError:
                    _bad(result, warn, f"{where}: line skipped: JSON nested too deeply")
                    continue
                except TraceReadError as exc:
                    _bad(result, warn, f"{exc}; line skipped")
                    continue
                if not spans:  # perhaps the writer's loss record
                    for writer, counts in loss_records(doc, result.lose):
                        result.note_export_losses(writer, counts)
                yield general(spans)
        except OSError as exc:
            raise TraceReadError(f"{path}: read failed: {exc.strerror or exc}") from None


def _lines(f: BinaryIO) -> Iterator[bytes | memoryview]:
    """The lines of ``f`` as ``for line in f`` gives them, most as views into a chunk
    read at once rather than a copy each: only a line across two chunks is joined."""
    parts: list[bytes] = []  # the start of a line begun in an earlier chunk
    while chunk := f.read(_BUFFER_BYTES):
        view = memoryview(chunk)
        pos = 0
        find = chunk.find
        end = find(b"\n")
        if end >= 0 and parts:
            parts.append(chunk[: end + 1])
            yield b"".join(parts)
            parts.clear()
            pos = end + 1
            end = find(b"\n", pos)
        while end >= 0:
            yield view[pos : end + 1]
            pos = end + 1
            end = find(b"\n", pos)
        if pos < len(chunk):
            parts.append(chunk[pos:])
    if parts:
        yield b"".join(parts)


def _bad(result: ReadResult, warn: Warn, message: str) -> None:
    result.lose(LOSS_BAD_LINE)
    if result.warn(message):
        warn(message)
