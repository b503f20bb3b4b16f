"""``otel-rollout report --jobs N``: several trace files read by a pool of processes, with
the figures of the sequential read to the nanosecond and in its order.

Files are read as one stream: a trajectory's phases can be in one rotated file and its
root in the next. The pool first scans each file's bytes for its trace ids (cheap); a
trace found in more than one file is a *straddler*. Each worker then assembles its file
alone (:mod:`._parallel_worker`), setting aside the spans of straddlers, and the parent
assembles each straddler from all its spans in file order once its last file is in.

Why that is exact: the sequential assembler finishes a trace ``WINDOW_SPANS`` spans after
its last root, at the latest at the end of the input. When no span of a trace arrives more
than that after its root and no trace is cut short by a full buffer, every trace holds all
its spans whatever the other traces, so a trace met in one file only is assembled the same
in that file alone. Its place in the output is known too: traces finished by the window
come out in the order their last root was read, the others at the end of the input in the
order they were first read. The parent hands trajectories on in that order (once no
straddler still open can come before them), so tables, the slowest list, the batch view
and the JSON are the same. Loss reasons keep the order they were first counted in,
incomplete trace ids and batch spans the order they were read in.

When either condition does not hold (a span far after its root: a line written twice much
later; a buffer that could fill), or a file's trace ids were not all found by the byte
scan, the input is read again sequentially (with ``reset`` called first when trajectories
were already handed on): the figures are the same either way, only slower.
"""

from __future__ import annotations

import heapq
import multiprocessing
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from otel_rollout import attributes as A
from otel_rollout.report import _assemble
from otel_rollout.report._batches import MAX_BATCHES
from otel_rollout.report._files import Warn, iter_file_rows
from otel_rollout.report._model import MAX_LISTED, ReadResult, Row, TraceReadError
from otel_rollout.report._model import TrajectoryTrace as Trajectory
from otel_rollout.report._parallel_worker import (
    END,
    CountingResult,
    FileRead,
    Tracker,
    read_file,
    trace_ids,
)
from otel_rollout.report._sources import expand, is_url, read_sources

#: Inputs smaller than this are read in this process: starting workers costs more.
MIN_PARALLEL_BYTES = 16 * 1024 * 1024


class _Sequential(Exception):
    """The parallel read cannot promise the sequential figures; the message says why."""


def default_jobs() -> int:
    """One: the parallel read costs more CPU than it saves wall time on a few cores, and
    each worker holds a whole file's trajectories (about 200 MiB for a 128 MiB file)."""
    return 1


def read_sources_parallel(
    sources: Sequence[str],
    *,
    jobs: int,
    bands: Mapping[str, str] | None = None,
    service: str | None = None,
    emit: Callable[[Trajectory], object] | None = None,
    warn: Warn | None = None,
    skipped: Callable[[Trajectory], object] | None = None,
    since: int | None = None,
    until: int | None = None,
    reset: Callable[[], object] | None = None,
    note: Callable[[str], object] | None = None,
    min_bytes: int | None = None,
    window_spans: int | None = None,
    max_buffered_spans: int | None = None,
    own_process: bool = False,
) -> ReadResult:
    """:func:`~._sources.read_sources` of trace files with ``jobs`` processes: the same
    result, trajectories handed to ``emit`` in the same order. URLs, one file, ``jobs``
    1 or less than ``min_bytes`` of input are read in this process.

    With ``reset``, trajectories are handed on as the files are read; should the input
    then need a sequential read after all, ``reset()`` is called first (the caller starts
    its tallies again). Without it, they are handed on once every file is read. ``note``
    is told why a parallel read went sequential. A worker that dies is a
    :class:`TraceReadError` naming its file. Workers are started with ``spawn`` (the caller
    may hold threads); ``own_process`` (the command's own process) may fork them."""
    window = _assemble.WINDOW_SPANS if window_spans is None else window_spans
    max_buf = _assemble.MAX_BUFFERED_SPANS if max_buffered_spans is None else max_buffered_spans
    files = expand(sources)

    def sequential() -> ReadResult:
        if window_spans is None and max_buffered_spans is None:  # the command's own read
            return read_sources(files, bands=bands, service=service, emit=emit, warn=warn,
                                since=since, until=until, skipped=skipped)  # fmt: skip
        result = ReadResult()
        keep = _keeper(emit or result.trajectories.append, service, skipped)
        return _sequential(files, result, keep, bands, warn, window, max_buf)

    small = MIN_PARALLEL_BYTES if min_bytes is None else min_bytes
    if jobs < 2 or len(set(files)) < 2 or any(map(is_url, files)) or _size(files) < small:
        return sequential()
    result = ReadResult()
    keep = _keeper(emit or result.trajectories.append, service, skipped)
    merge = _Merge(result, keep, bands, window, max_buf, stream=reset is not None)
    try:
        _read_parallel(files, jobs, merge, bands, warn, window, max_buf, own_process)
    except _Sequential as why:
        if note is not None and str(why):
            note(f"{why}; read sequentially")
        if merge.handed and reset is not None:
            reset()
        return sequential()
    return result


def _keeper(
    keep: Callable[[Trajectory], object],
    service: str | None,
    skipped: Callable[[Trajectory], object] | None,
) -> Callable[[Trajectory], object]:
    """``keep`` for ``service``'s trajectories, as :func:`read_sources` filters them."""
    if service is None:
        return keep

    def keep_service(t: Trajectory) -> None:
        if t.service in (service, None):
            keep(t)
        elif skipped is not None:
            skipped(t)

    return keep_service


def _size(files: Sequence[str]) -> int:
    try:
        return sum(os.path.getsize(f) for f in files)
    except OSError:
        return 0  # the sequential read says which


def _sequential(  # read_sources' loop, for a window or buffer of another size (tests)
    files: Sequence[str],
    result: ReadResult,
    keep: Callable[[Trajectory], object],
    bands: Mapping[str, str] | None,
    warn: Warn | None,
    window: int,
    max_buf: int,
) -> ReadResult:
    asm = _assemble.TraceAssembler(
        keep, result, bands=bands, window_spans=window, max_buffered_spans=max_buf
    )
    for path in files:
        for rows in iter_file_rows(path, result, warn):
            asm.add_rows(rows)
    return asm.finish()


def _context(own_process: bool) -> multiprocessing.context.BaseContext:
    """``fork`` for the command's own process on Linux while it runs no other thread (the
    workers start at no cost, the reader already imported); else ``spawn``."""
    if own_process and sys.platform == "linux" and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _get(future: Future, path: str) -> Any:
    """A worker's answer; its death or an unexpected error is a :class:`TraceReadError`."""
    try:
        return future.result()
    except TraceReadError:
        raise
    except BrokenProcessPool as exc:
        raise TraceReadError(f"{path}: the process reading it stopped ({exc})") from None
    except Exception as exc:  # said with the file it happened on
        raise TraceReadError(f"{path}: reading failed: {type(exc).__name__}: {exc}") from None


def _read_parallel(
    files: list[str],
    jobs: int,
    merge: _Merge,
    bands: Mapping[str, str] | None,
    warn: Warn | None,
    window: int,
    max_buf: int,
    own_process: bool,
) -> None:
    context = _context(own_process)
    pool = ProcessPoolExecutor(max_workers=min(jobs, len(files)), mp_context=context)
    try:
        ids = [
            _get(f, p)
            for f, p in zip([pool.submit(trace_ids, p) for p in files], files, strict=True)
        ]
        if any(i is None for i in ids):
            raise _Sequential("")  # the sequential read says which file, and why
        seen: set[str] = set()
        straddlers: set[str] = set()  # trace ids in more than one file
        for found in ids:
            straddlers |= seen & found
            seen |= found
        del seen
        last: dict[str, int] = {}  # a straddler's last file
        for k in reversed(range(len(ids))):
            for tid in straddlers & ids[k]:
                last.setdefault(tid, k)
        merge.plan(last)
        futures = [
            pool.submit(
                read_file,
                p,
                found,
                frozenset(t for t in found if t in straddlers),
                bands,
                window,
                max_buf,
            )
            for p, found in zip(files, ids, strict=True)
        ]
        del ids
        futures.reverse()
        for k, path in enumerate(files):
            merge.add_file(k, _get(futures.pop(), path))  # its result let go once merged
        merge.finish(warn)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


class _Merge:
    """The files' reads put back into the sequential read's result and order."""

    def __init__(
        self,
        result: ReadResult,
        keep: Callable[[Trajectory], object],
        bands: Mapping[str, str] | None,
        window: int,
        max_buf: int,
        stream: bool,
    ) -> None:
        self.result, self.keep, self.bands = result, keep, bands
        self.window, self.max = window, max_buf
        self.stream = stream
        self.handed = False
        self.offset = 0  # spans read before the current file
        self.last_added = 0
        self._pending: list[tuple[int, int, int, list[Trajectory]]] = []  # a heap
        self._seq = 0
        self._incomplete: list[tuple[int, str]] = []
        self._batches: list[tuple[float, str, Any]] = []
        self._counts: dict[str, int] = {}
        self._first_loss: dict[str, tuple[float, int, int]] = {}
        self._rootless = 0  # spans held to the end of the input: traces with no root
        self._open: list[tuple[int, int]] = []  # (last root, spans) perhaps still held
        self._diverted = 0
        self._spans: dict[str, list[tuple[int, Row]]] = {}
        self._last_file: dict[int, list[str]] = {}
        self._first_root: dict[str, int] = {}
        self._messages: list[str] = []

    def plan(self, last: Mapping[str, int]) -> None:
        """``last``: each straddler's last file, when it can be assembled."""
        for tid, k in last.items():
            self._spans[tid] = []
            self._last_file.setdefault(k, []).append(tid)

    def add_file(self, k: int, fr: FileRead) -> None:
        if fr.problem is not None:
            raise _Sequential(fr.problem)
        off, result = self.offset, self.result
        self._diverted += len(fr.diverted)  # spans of straddlers not assembled yet
        held = fr.peak + self._rootless + sum(n for _, n in self._open) + self._diverted
        if held >= self.max:
            raise _Sequential(f"the read buffer could fill ({self.max} spans)")
        part = fr.result
        result.spans += part.spans
        result.found += part.found
        for writer, counts in part.writer_losses.items():
            result.note_export_losses(writer, counts)
        self._losses(part.losses, fr.first_loss, off, k)
        self._messages.extend(m for m in fr.messages if result.warn(m))
        for ready, first, trajectories in fr.groups:
            self._push(ready + off, first + off, trajectories)
        self._incomplete.extend((first + off, tid) for first, tid in fr.incomplete)
        self._batches.extend((q + off, key, span) for q, key, span in fr.batch_events)
        for q, row in fr.diverted:
            tid, span = row[0], row[7]
            self._spans[tid].append((q + off, row))
            rooted = span is not None and A.TRAJECTORY_ID in span.attributes
            if rooted and tid not in self._first_root:
                self._first_root[tid] = q + off
        if fr.last_added:
            self.last_added = max(self.last_added, fr.last_added + off)
        self._rootless += fr.rootless
        self._open.extend((r + off, n) for r, n in fr.open_at_end)
        for tid in self._last_file.pop(k, ()):
            self._straddler(tid, k)
        self._open = [(r, n) for r, n in self._open if r + self.window > self.last_added]
        self.offset += fr.positions
        if self.stream:
            # a straddler still open comes out after its last root: after its first one
            self._release(min(self._first_root.values(), default=END), self.offset + 1)

    def _straddler(self, tid: str, k: int) -> None:
        """Assemble a trace from its spans in every file, in order (all of them are in)."""
        part = CountingResult()
        tracker = Tracker(part, self.bands, self.window, sys.maxsize, sys.maxsize)
        spans = self._spans.pop(tid)
        self._diverted -= len(spans)
        for q, row in spans:
            tracker.position = q - 1  # its position in the whole stream
            tracker.add_rows([row])
        tracker.finish()
        self._first_root.pop(tid, None)
        if tracker.far is not None:
            raise _Sequential(f"trace {tid} has a span {self.window}+ spans after its root")
        self.result.spans += part.spans
        self.result.found += part.found
        self._losses(part.losses, part.first_loss, 0, k)
        for ready, first, trajectories in tracker.groups():
            self._push(ready, first, trajectories)
        info = tracker.traces.get(tid)
        if part.incomplete and info is not None:
            self._incomplete.append((info[0], tid))
        self._batches.extend(tracker.batch_events)
        self.last_added = max(self.last_added, tracker.last_added)
        if info is not None:  # held until the window passes its root, or to the end
            if info[1] < 0:
                self._rootless += info[2]
            else:
                self._open.append((info[1], info[2]))

    def _losses(
        self, counts: Mapping[str, int], first: Mapping[str, tuple[float, int]], off: int, k: int
    ) -> None:
        for why, n in counts.items():
            self._counts[why] = self._counts.get(why, 0) + n
            q, i = first[why]
            key = (q + off, k, i) if q != END else (END, 0, 0)
            if why not in self._first_loss or key < self._first_loss[why]:
                self._first_loss[why] = key

    def _push(self, ready: int, first: int, trajectories: list[Trajectory]) -> None:
        self._seq += 1
        heapq.heappush(self._pending, (ready, first, self._seq, trajectories))

    def _release(self, before: float, next_position: int) -> None:
        """Hand on the trajectories the sequential read had emitted by now: finished by the
        window (a span was added far enough after their root) and read before ``before``
        (the first root of a straddler still open)."""
        limit = min(before, next_position)
        pending = self._pending
        while pending and pending[0][0] < limit and pending[0][0] + self.window <= self.last_added:
            self._hand(heapq.heappop(pending)[3])

    def _hand(self, trajectories: list[Trajectory]) -> None:
        self.handed = True
        for t in trajectories:
            self.keep(t)

    def finish(self, warn: Warn | None) -> None:
        """The end of the input: the rest in the sequential read's order, then the result."""
        for message in self._messages:  # said once the read cannot go sequential any more
            (warn or _warn)(message)
        pending = self._pending
        while pending and pending[0][0] + self.window <= self.last_added:
            self._hand(heapq.heappop(pending)[3])
        for _, _, _, trajectories in sorted(pending, key=lambda p: (p[1], p[2])):
            self._hand(trajectories)
        pending.clear()
        result = self.result
        result.incomplete = [tid for _, tid in heapq.nsmallest(MAX_LISTED, self._incomplete)]
        self._batches.sort(key=lambda e: e[0])
        for _, key, span in self._batches:
            if len(result.batches) < MAX_BATCHES:
                result.batches[key] = span
        order = sorted(self._counts, key=lambda why: self._first_loss[why])
        result.losses = {why: self._counts[why] for why in order}


def _warn(message: str) -> None:
    import warnings

    warnings.warn(message, stacklevel=4)
