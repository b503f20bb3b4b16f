"""Read back the records of a wandb run's transaction log (``run-<id>.wandb``), the file
an offline run writes: a 7-byte header, then LevelDB-style log records in 32 KiB blocks,
each a ``wandb_internal_pb2.Record``."""

from __future__ import annotations

import json
import struct
import time
from pathlib import Path
from typing import Any

_BLOCK = 32 * 1024
_HEADER = 7  # ":W&B", a 2-byte magic, a version byte
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _payloads(data: bytes):
    pos, pending = _HEADER, b""
    while pos + 7 <= len(data):
        left = _BLOCK - pos % _BLOCK
        if left < 7:  # the block's tail is padding
            pos += left
            continue
        _crc, length, kind = struct.unpack_from("<IHB", data, pos)
        if pos + 7 + length > len(data):  # a record still being written
            return
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind == _FULL:
            yield chunk
        elif kind == _FIRST:
            pending = chunk
        elif kind == _MIDDLE:
            pending += chunk
        elif kind == _LAST:
            yield pending + chunk
            pending = b""
        elif kind == 0 and length == 0:  # zero padding
            pos += _BLOCK - pos % _BLOCK if pos % _BLOCK else 0


def records(path: str | Path) -> list[Any]:
    """The run's records, in order."""
    from wandb.proto import wandb_internal_pb2 as pb

    out = []
    for payload in _payloads(Path(path).read_bytes()):
        rec = pb.Record()
        rec.ParseFromString(payload)
        out.append(rec)
    return out


def history(path: str | Path, wait_s: float = 30.0) -> list[dict[str, Any]]:
    """Each ``run.log`` row of the run, keys to decoded JSON values. The log is written
    by wandb's own process, which may still be writing when ``wandb.finish()`` returns:
    read until its ``exit`` record is there (at most ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    from google.protobuf.message import DecodeError

    while True:
        try:
            recs = records(path) if Path(path).exists() else []
        except DecodeError:  # read while a block was half written: read again
            recs = []
        if any(r.WhichOneof("record_type") == "exit" for r in recs):
            break
        if time.monotonic() > deadline:
            raise AssertionError(f"{path}: no exit record after {wait_s} s")
        time.sleep(0.1)
    return [{(i.key or "/".join(i.nested_key)): json.loads(i.value_json)
             for i in r.history.item}
            for r in recs if r.WhichOneof("record_type") == "history"]  # fmt: skip
