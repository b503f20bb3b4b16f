"""The real Jaeger v2 reads the trace file: each line posted to its ``/api/transform``
(what its UI does with an uploaded OTLP JSON file) comes back as Jaeger traces holding
every span of the line, attributes of every type and non-ASCII text intact."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
from _backends import Stack, need

from otel_rollout import configure

TEXT = "réponse 日本語 ✓"


def _write_trace_file(folder: Path) -> list[bytes]:
    rollout = configure(local=True, output_dir=folder, metrics_exporter="none",
                        service_name="transform")  # fmt: skip
    tracer = rollout.tracer
    with tracer.batch(1):
        for i in range(12):
            with tracer.trajectory(f"t{i}", env="e", model="m") as traj:
                attrs = {"note": TEXT, "ratio": 0.5, "flag": True, "ids": (1, 2, 3),
                         "names": ("a", "é")}  # fmt: skip
                for key, value in attrs.items():
                    traj.set_attribute(key, value)
                with traj.env_setup():
                    pass
                with traj.generate() as gen:
                    gen.record(input_tokens=3, output_tokens=4, finish_reasons=["stop"])
                with traj.env_step():
                    pass
    rollout.shutdown(10)
    return [ln for p in sorted(folder.rglob("*.jsonl")) for ln in p.read_bytes().splitlines()]


def _span_ids(line: bytes) -> set[str]:
    doc = json.loads(line)
    return {sp["spanId"] for rs in doc["resourceSpans"] for ss in rs.get("scopeSpans", [])
            for sp in ss.get("spans", [])}  # fmt: skip


def test_jaeger_accepts_every_line_of_the_trace_file(tmp_path):
    need("jaeger")
    lines = [ln for ln in _write_trace_file(tmp_path / "out") if _span_ids(ln)]
    assert lines
    stack = Stack(tmp_path / "backends")
    try:
        jaeger = stack.jaeger()
        url = f"http://127.0.0.1:{jaeger.ports['query_http']}/api/transform"
        seen_text = False
        for line in lines:
            req = urllib.request.Request(url, data=line, method="POST",
                                         headers={"Content-Type": "application/json"})  # fmt: skip
            with urllib.request.urlopen(req, timeout=30) as resp:
                assert resp.status == 200
                answer = json.loads(resp.read())
            spans = [s for t in answer["data"] for s in t["spans"]]
            assert {s["spanID"] for s in spans} == _span_ids(line)
            for s in spans:
                tags = {t["key"]: t["value"] for t in s.get("tags", [])}
                if "note" in tags:
                    assert tags["note"] == TEXT and tags["flag"] is True
                    assert tags["ratio"] == pytest.approx(0.5)
                    seen_text = True
        assert seen_text
    finally:
        stack.stop()
