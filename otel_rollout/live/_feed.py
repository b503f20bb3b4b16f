"""The input side of ``otel-rollout top``: poll the sources (files or the embedded OTLP
receiver) within a time budget, feed what arrived to the state, and say in plain lines
what is wrong with a source (missing, not a trace file, no longer growing)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from otel_rollout.live._ingest import Ingest
from otel_rollout.live._sources import FileTail, Sources

#: Bytes read from one file per read call; a poll goes on while its budget lasts.
CHUNK_BYTES = 4 * 1024 * 1024


class Feed:
    """Polls ``sources`` (files) and/or ``listener`` into ``ingest``."""

    def __init__(self, ingest: Ingest, sources: Sources | None = None, listener: Any = None,
                 *, stale_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.ingest = ingest
        self.sources = sources
        self.listener = listener
        self.stale_s = stale_s
        self._clock = clock
        self._good: dict[FileTail, int] = {}
        self._bad: dict[FileTail, tuple[int, str]] = {}
        self._errors: dict[str, str] = {}
        self.started = clock()
        self.last_data: float | None = None
        self.caught_up = False

    def poll(self, budget_s: float = 0.5) -> int:
        """Read what arrived, for at most about ``budget_s``; the lines or requests read."""
        deadline = self._clock() + budget_s
        n = 0
        if self.listener is not None:
            for doc in self.listener.take(deadline, self._clock):
                self.ingest.document(doc, "otlp")
                n += 1
        if self.sources is not None:
            tails = self.sources.discover()
            more = True
            while more and self._clock() < deadline:
                more = False
                for tail in tails:
                    got = self._read(tail)
                    n += got
                    more = more or (got > 0 and tail.pending)
                    if self._clock() >= deadline:
                        break
            self.caught_up = not any(t.pending for t in tails)
        else:
            self.caught_up = True
        if n:
            self.last_data = self._clock()
        return n

    def _read(self, tail: FileTail) -> int:
        where = str(tail.path)
        try:
            lines = tail.read(CHUNK_BYTES)
        except OSError as exc:
            self._errors[where] = f"{where}: cannot read ({exc.strerror or exc})"
            return 0
        self._errors.pop(where, None)
        ingest = self.ingest
        for i, line in enumerate(lines):
            if ingest.line(line, f"{where}:{tail.lines_read - len(lines) + i + 1}"):
                self._good[tail] = self._good.get(tail, 0) + 1
            elif tail not in self._bad:
                self._bad[tail] = (1, ingest.last_error or "")
            else:
                k, first = self._bad[tail]
                self._bad[tail] = (k + 1, first)
        return len(lines)

    # --- what the screen says ------------------------------------------------------------
    def quiet_s(self) -> float | None:
        """Seconds since the sources last grew (a file written, a request received);
        None before anything was read."""
        if self.last_data is None:
            return None
        quiet = self._clock() - self.last_data
        if self.sources is not None and self.sources.tails:
            newest = max(t.mtime for t in self.sources.tails.values())
            quiet = (
                min(quiet, max(0.0, time.time() - newest))
                if self.listener
                else max(0.0, time.time() - newest)
            )
        return quiet

    def status(self) -> str:
        """``live``, ``waiting`` (nothing read yet) or ``stale Ns``."""
        quiet = self.quiet_s()
        if quiet is None:
            return "waiting"
        return "live" if quiet < self.stale_s else f"stale {quiet:.0f}s"

    def notes(self) -> list[str]:
        """Lines about the sources: what is missing, unreadable, not trace JSON, quiet."""
        out: list[str] = []
        if self.listener is not None:
            out.append(self.listener.describe())
        if self.sources is not None:
            out += self.sources.notes
        out += self._errors.values()
        for tail, (k, first) in self._bad.items():
            if not self._good.get(tail):
                out.append(f"{tail.path}: not a trace file ({k} lines; {first.split(': ', 1)[-1]})")
            else:
                out.append(f"{tail.path}: {k} bad lines skipped ({first})")
        quiet = self.quiet_s()
        if quiet is not None:
            if quiet >= self.stale_s:
                out.append(f"no new data for {quiet:.0f}s: the run finished or stalled")
        elif self.sources is not None and self.sources.tails and self._clock() - self.started > 5:
            out.append("the trace files hold no spans yet (a batch is written every few s)")
        return out

    def reader_losses(self) -> dict[str, int]:
        """What the reading itself lost (bad lines, cut traces...), for the export line."""
        out = dict(self.ingest.result.losses)
        if self.ingest.bad_lines:
            out["bad lines"] = self.ingest.bad_lines
        if self.listener is not None and self.listener.dropped:
            out["receiver queue full"] = self.listener.dropped
        return out
