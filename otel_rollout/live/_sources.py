"""Where ``otel-rollout top`` reads: trace files tailed as they grow, found again each poll.

A SOURCE is a trace file (and the files it rotates into: ``traces-X_0001.jsonl``...), a
glob, or a folder being written. A folder shows one run: the run of its newest file
(``--run`` names another), found in each file's first line (``rollout.run.id`` of its
resource), so the processes of one run (Ray workers, ranks, forked children) writing
files of their own into one folder show together, and files that appear later (a
rotation, a worker that starts late) are picked up.

Files are read incrementally: each poll reads what was appended since the last one, at
most ``max_bytes`` a poll, and keeps a partial last line until it is complete; nothing
is read twice. A file that shrinks or is replaced is read again from its start (and
said so). Problems are *notes* for the screen, never exceptions.
"""

from __future__ import annotations

import glob
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

#: The default folder (``configure()``'s default output folder).
DEFAULT_FOLDER = "otel-rollout-output"
#: A partial line longer than this is dropped (and counted): no trace file writes one.
MAX_LINE_BYTES = 256 * 1024 * 1024
#: Bytes read from a file's start to find its run id.
PEEK_BYTES = 64 * 1024 * 1024
#: :func:`run_of_file`'s answer for a file whose first line is not trace JSON.
NOT_TRACE = "\0"


class FileTail:
    """One file read incrementally: :meth:`read` answers the complete lines appended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""
        self._ino: int | None = None
        self.bytes_read = 0
        self.lines_read = 0
        #: monotonic time of the last poll that found new bytes (None: none yet)
        self.grew_at: float | None = None
        self.restarted = 0
        self.mtime = 0.0  # the file's modification time (wall clock), at the last read
        self.overlong = 0

    def read(self, max_bytes: int) -> list[bytes]:
        """The complete lines appended since the last call (at most ``max_bytes`` read).
        Raises OSError when the file cannot be opened."""
        with self.path.open("rb") as f:
            st = os.fstat(f.fileno())
            if (self._ino is not None and st.st_ino != self._ino) or st.st_size < self.offset:
                self.offset, self._partial = 0, b""  # replaced or truncated: from the start
                self.restarted += 1
            self._ino = st.st_ino
            self.mtime = st.st_mtime
            if st.st_size == self.offset:
                return []
            f.seek(self.offset)
            data = f.read(max_bytes)
        self.offset += len(data)
        self.bytes_read += len(data)
        self.grew_at = time.monotonic()
        if self._partial:
            data = self._partial + data
        lines = data.split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE_BYTES:
            self._partial = b""
            self.overlong += 1
        self.lines_read += len(lines)
        return [line for line in lines if line.strip()]

    @property
    def pending(self) -> bool:
        """Bytes on disk not read yet (a poll stopped at its budget)."""
        try:
            return self.path.stat().st_size > self.offset
        except OSError:
            return False


def run_of_file(path: Path) -> str | None:
    """The ``rollout.run.id`` of the first resource in ``path``'s first line, or None
    (an empty file, one whose first line is still being written); :data:`NOT_TRACE` when
    that line is not trace JSON."""
    try:
        with path.open("rb") as f:
            line = f.readline(PEEK_BYTES)
    except OSError:
        return None
    if not line.endswith(b"\n"):
        return None
    try:
        doc = json.loads(line)
        for rs in doc.get("resourceSpans") or ():
            for kv in (rs.get("resource") or {}).get("attributes") or ():
                if kv.get("key") == "rollout.run.id":
                    value = kv.get("value") or {}
                    return str(value.get("stringValue", value.get("intValue", "")))
    except (ValueError, AttributeError, TypeError):
        return NOT_TRACE
    return ""  # a trace file without a run id


def rotations_of(path: Path) -> list[Path]:
    """``path``'s rotated files present now (``X_0001.jsonl``...), in order."""
    pattern = f"{glob.escape(str(path.with_suffix('')))}_[0-9][0-9][0-9][0-9]{path.suffix}"
    return sorted(Path(p) for p in glob.glob(pattern))


@dataclass
class Sources:
    """The files to read for the SOURCE arguments, found again at each :meth:`discover`."""

    specs: list[str]
    run: str | None = None  # a folder's run: given (--run) or that of its newest file
    tails: dict[Path, FileTail] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _runs: dict[Path, str | None] = field(default_factory=dict)

    @classmethod
    def of(cls, specs: Iterable[str], run: str | None = None) -> Sources:
        return cls(list(specs) or [DEFAULT_FOLDER], run)

    def discover(self) -> list[FileTail]:
        """Every file to read now, new ones added; ``notes`` says what is missing."""
        notes: list[str] = []
        for spec in self.specs:
            path = Path(spec)
            if path.is_dir():
                self._folder(path, notes)
            elif glob.has_magic(spec):
                found = sorted(Path(p) for p in glob.glob(spec))
                if not found:
                    notes.append(f"{spec}: no file matches yet (waiting)")
                for p in found:
                    self._add(p)
            elif path.exists():
                self._add(path)
                for p in rotations_of(path):
                    self._add(p)
            else:
                notes.append(f"{spec}: no such file or folder (waiting for it)")
        self.notes = notes
        return list(self.tails.values())

    def _add(self, path: Path) -> None:
        if path not in self.tails:
            self.tails[path] = FileTail(path)

    def _folder(self, folder: Path, notes: list[str]) -> None:
        try:
            files = [Path(e.path) for e in os.scandir(folder)
                     if e.name.endswith((".jsonl", ".json")) and e.is_file()]  # fmt: skip
        except OSError as exc:
            notes.append(f"{folder}: cannot list ({exc.strerror or exc})")
            return
        for p in files:
            if self._runs.get(p) is None and p not in self.tails:
                self._runs[p] = run_of_file(p)
        if self.run is None:
            known = [p for p in files if self._runs.get(p) not in (None, NOT_TRACE)]
            if not known:
                notes.append(f"{folder}: no trace file with spans yet (waiting)")
                return
            newest = max(known, key=_mtime)
            self.run = self._runs[newest]
        for p in files:
            if self._runs.get(p) == self.run:
                self._add(p)
        if not any(t.path.parent == folder for t in self.tails.values()):
            notes.append(f"{folder}: no trace file of run {self.run} yet (waiting)")


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
