"""The export queue's overflow, packed in chunks: a few hundred objects for the collector.

A disk that stops answering fills the trace file's burst room: a hundred thousand spans
waiting. Each full garbage collection walks every item of the batch processor's queue (a
deque), even items it no longer tracks, so a queue of 100,000 compact records cost every
thread a stall of several milliseconds at each one. Past :data:`BACKLOG_ABOVE` waiting
spans, :class:`Backlog` holds them instead, as compact records (:mod:`.otlp_compact`)
packed :data:`CHUNK` to a tuple that the collector stops tracking with its records: it
walks a deque of a few hundred chunks.

The exporter's thread moves chunks into the queue, oldest first, after each export
(:meth:`Backlog.move`), so the queue never runs dry while the backlog holds spans; a span
that ends while fewer than :data:`BACKLOG_ABOVE` wait moves whatever a race left behind
first. ``force_flush`` and ``shutdown`` move it all. The lock guards a list append and a
few pops, never a write: a hung disk blocks the exporter's thread in ``write()`` with
the lock free.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from otel_rollout._base.fork import reset_in_child

#: Spans waiting beyond which new ones go to the backlog (the batch processor's queue
#: keeps this many, enough for its exporter to take full batches from).
BACKLOG_ABOVE = 2048
#: Records per chunk: a full burst room (100,000) is about 400 chunks.
CHUNK = 256


class Backlog:
    """Records waiting behind the batch processor's queue, in chunks (see the module).

    ``emit(record)`` hands one record to the queue (the SDK batch processor's ``emit``).
    """

    def __init__(self, emit: Callable[[Any], None], chunk: int = CHUNK) -> None:
        self._emit = emit
        self._chunk = max(1, int(chunk))
        self._reset()
        reset_in_child(self, Backlog._reset)

    def _reset(self) -> None:
        """New state (also in a forked child: the parent's spans are the parent's)."""
        self._lock = threading.Lock()
        self._sealed: deque[tuple[Any, ...]] = deque()
        self._open: list[Any] = []
        self._size = 0
        self._closed = False

    def __len__(self) -> int:
        """Records held."""
        return self._size

    @property
    def chunks(self) -> int:
        """Objects the backlog holds its records in (sealed chunks and the open one)."""
        return len(self._sealed) + 1

    def add(self, record: Any) -> bool:
        """Hold ``record`` behind those held; False once :meth:`close` was called."""
        with self._lock:
            if self._closed:
                return False
            current = self._open
            current.append(record)
            self._size += 1
            if len(current) >= self._chunk:
                # a tuple of records the collector no longer tracks is not tracked either
                self._sealed.append(tuple(current))
                self._open = []
        return True

    def move(self, room: int) -> int:
        """Hand the oldest records to the queue, whole chunks, until at least ``room``
        moved or none is left; returns how many moved. Emitted outside the lock."""
        taken: list[Any] = []
        n = 0
        with self._lock:
            while n < room and self._sealed:
                chunk = self._sealed.popleft()
                taken.append(chunk)
                n += len(chunk)
            if n < room and self._open:
                taken.append(self._open)
                n += len(self._open)
                self._open = []
            self._size -= n
        emit = self._emit
        for chunk in taken:
            for record in chunk:
                emit(record)
        return n

    def close(self) -> int:
        """Move every record to the queue and hold no more (``add`` answers False);
        returns how many moved."""
        with self._lock:
            self._closed = True
        return self.move(self._size)


__all__ = ["BACKLOG_ABOVE", "CHUNK", "Backlog"]
