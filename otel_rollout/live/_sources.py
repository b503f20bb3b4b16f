"""Where ``otel-rollout top`` reads (docs/live.md, Sources), found again at each poll and
tailed; problems are *notes* for the screen, never exceptions."""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

#: The default folder (``configure()``'s default output folder).
DEFAULT_FOLDER = "otel-rollout-output"
#: A partial line longer than this is dropped.
MAX_LINE_BYTES = 256 * 1024 * 1024
#: Bytes read from a file's start to find its run id.
PEEK_BYTES = 64 * 1024 * 1024
#: :func:`run_of_file`'s answer for a file whose first line is not trace JSON.
NOT_TRACE = "\0"


class FileTail:
    """One file read incrementally: :meth:`read` answers the complete lines appended."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = self.lines_read = 0
        self._partial = b""
        self._ino: int | None = None
        self.mtime = 0.0  # the file's modification time (wall clock), at the last read

    def read(self, max_bytes: int) -> list[bytes]:
        """The complete lines appended since the last call (at most ``max_bytes`` read);
        a file replaced or cut is read again from its start. OSError if it cannot open."""
        with self.path.open("rb") as f:
            st = os.fstat(f.fileno())
            if (self._ino is not None and st.st_ino != self._ino) or st.st_size < self.offset:
                self.offset, self._partial = 0, b""
            self._ino, self.mtime = st.st_ino, st.st_mtime
            if st.st_size == self.offset:
                return []
            f.seek(self.offset)
            data = f.read(max_bytes)
        self.offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if len(self._partial) > MAX_LINE_BYTES:  # no trace file writes one
            self._partial = b""
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
    except (ValueError, AttributeError, TypeError, RecursionError):  # nested too deeply
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
    follow: bool = False  # follow a newer run that starts in the folder (no --run)
    tails: dict[Path, FileTail] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    switches: int = 0  # newer runs followed (what was read before is another run's)
    followed: str | None = None  # the line saying which run is followed
    _runs: dict[Path, str | None] = field(default_factory=dict)
    _seen_runs: set[str] = field(default_factory=set)

    @classmethod
    def of(cls, specs: Iterable[str], run: str | None = None) -> Sources:
        return cls(list(specs) or [DEFAULT_FOLDER], run, run is None)

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
                for p in (path, *rotations_of(path)):
                    self._add(p)
            else:
                notes.append(f"{spec}: no such file or folder (waiting for it)")
        if self.followed:
            notes.append(self.followed)
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
        fresh = []
        for p in files:
            if self._runs.get(p) is None and p not in self.tails:
                self._runs[p] = run_of_file(p)
                if self._runs[p] not in (None, NOT_TRACE):
                    fresh.append(p)
        if self.run is not None and self.follow:
            self._follow_newer(folder, fresh)
        self._seen_runs.update(str(r) for p in fresh if (r := self._runs[p]) is not None)
        if self.run is None:
            known = [p for p in files if self._runs.get(p) not in (None, NOT_TRACE)]
            if not known:
                notes.append(f"{folder}: no trace file with spans yet (waiting)")
                return
            self.run = self._runs[max(known, key=_mtime)]
        for p in files:
            if self._runs.get(p) == self.run:
                self._add(p)
        if not any(t.path.parent == folder for t in self.tails.values()):
            notes.append(f"{folder}: no trace file of run {self.run} yet (waiting)")

    def _follow_newer(self, folder: Path, fresh: list[Path]) -> None:
        """Switch to the run of a file that appeared since the last look, when that run
        was never seen before: a newer run started in the folder."""
        newer = [p for p in fresh if self._runs[p] not in (self.run, *self._seen_runs)]
        if not newer:
            return
        old, self.run = self.run, self._runs[max(newer, key=_mtime)]
        for path in [p for p in self.tails if p.parent == folder]:
            del self.tails[path]
        self.switches += 1
        self.followed = f"following run {self.run}, newer than run {old} (--run picks one)"


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
