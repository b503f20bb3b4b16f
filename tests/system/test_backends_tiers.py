"""Tail sampling and two tiers, on the real Collector with the shipped configs.

A configure()d run in its own process (tests/_support/_traced_run.py toy) sends OTLP; the
Collectors' trace exporters point at real OTLP receivers (one per destination), so every
span that leaves a Collector is seen, and the process's own trace file says what it
emitted.

- collector-tail-sampling.yaml keeps every failed trajectory whole and exactly the share
  of the rest its probabilistic policy selects (the Collector's FNV-1a trace id hash).
- agent.yaml + two gateway.yaml: the loadbalancing exporter (static resolver) puts every
  trace whole in exactly one gateway; with one gateway killed the run goes on, and the
  spans lost are exactly those the agent's own metrics report as failed.
- Both take the in-flight record (OTLP logs): each config has a logs pipeline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from _backends import ROOT, Server, Stack, collector_metric, need, wait_until

from otel_rollout.testing.receiver import OTLPReceiver

#: Both configs' decision_wait is 30 min for real rollouts; here trajectories last < 0.2 s.
DECISION_WAIT = "2s"


class ToyRun:
    """tests/_support/_traced_run.py toy: batches on demand, over OTLP to ``endpoint``."""

    def __init__(self, endpoint: str, out: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(PYTHONPATH=str(ROOT), OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
        self.out = out
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "tests" / "_support" / "_traced_run.py"), "toy", str(out)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=(out / "toy.log").open("w"),
            text=True,
        )

    def batch(self, n: int, fail_every: int = 0) -> list[dict[str, Any]]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(f"{n} {fail_every}\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, f"traced run died:\n{(self.out / 'toy.log').read_text()}"
        return json.loads(line)["breakdowns"]

    def close(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin
            self.proc.stdin.write("exit\n")
            self.proc.stdin.flush()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def emitted(self) -> dict[str, set[str]]:
        """trace id -> span ids written to the process's own file (flushed per batch)."""
        out: dict[str, set[str]] = {}
        path = self.out / "emitted.jsonl"
        for line in path.read_text().splitlines() if path.exists() else []:
            for rs in json.loads(line)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    for sp in ss["spans"]:
                        out.setdefault(sp["traceId"].lower(), set()).add(sp["spanId"].lower())
        return out


def received(sink: OTLPReceiver) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s in sink.spans():
        out.setdefault(s.trace_id, []).append(s.span_id)
    return out


def fnv1a_64(data: bytes) -> int:
    h = 0xCBF29CE484222325
    for b in data:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def probabilistic_keeps(trace_id: str, percent: float) -> bool:
    """tail_sampling's probabilistic policy: FNV-1a of salt + trace id <= threshold."""
    threshold = int((2**64 - 1) * (percent / 100))
    return fnv1a_64(b"default-hash-seed" + bytes.fromhex(trace_id)) <= threshold


@pytest.fixture
def sinks() -> Iterator[list[OTLPReceiver]]:
    started: list[OTLPReceiver] = []

    class Factory(list):
        def new(self) -> OTLPReceiver:
            r = OTLPReceiver().start()
            started.append(r)
            return r

    yield Factory()  # type: ignore[misc]
    for r in started:
        r.stop()


def _gateway_env(
    sink: OTLPReceiver, tempo: OTLPReceiver, metrics: OTLPReceiver, **extra: str
) -> dict[str, str]:
    return {
        "JAEGER_OTLP_ENDPOINT": f"127.0.0.1:{sink.grpc_port}",
        "TEMPO_OTLP_ENDPOINT": f"127.0.0.1:{tempo.grpc_port}",
        "PROMETHEUS_OTLP_URL": f"{metrics.http_endpoint}/v1/metrics",
        "TAIL_SAMPLING_DECISION_WAIT": DECISION_WAIT,
        "SPANMETRICS_FLUSH_INTERVAL": "1s",
        **extra,
    }


def test_tail_sampling_keeps_failed_trajectories_whole_and_the_configured_share(
    tmp_path: Path, sinks: Any
) -> None:
    need("otelcol")
    percent = 20.0
    jaeger, tempo, metrics = sinks.new(), sinks.new(), sinks.new()
    stack = Stack(tmp_path)
    run = None
    try:
        col = stack.collector(
            "collector-tail-sampling.yaml",
            _gateway_env(jaeger, tempo, metrics, TAIL_SAMPLING_BASELINE_PERCENT=str(percent)),
        )
        with stack.logs_on_failure():
            run = ToyRun(f"http://127.0.0.1:{col.ports['otlp_grpc']}", tmp_path)
            bds = run.batch(60, fail_every=4)
            emitted = run.emitted()
            failed = {b["trace_id"] for b in bds if b["status"] == "error"}
            ok = {b["trace_id"] for b in bds} - failed
            assert len(failed) == 15 and len(ok) == 45
            wait_until("the in-flight record accepted (a logs pipeline)",
                       lambda: _accepted(col, "log_records") >= 1, timeout_s=30)  # fmt: skip
            expected = failed | {t for t in ok if probabilistic_keeps(t, percent)}
            # Decided decision_wait after each trace's first span; then exported.
            wait_until(
                "every kept trace whole at both trace exporters",
                lambda: all(
                    sorted(received(s).get(t, [])) == sorted(emitted[t])
                    for s in (jaeger, tempo)
                    for t in expected
                ),
                timeout_s=60,
            )
            time.sleep(3)  # another decision_wait: nothing else may arrive
            for sink in (jaeger, tempo):
                got = received(sink)
                assert set(got) == expected, (set(got) - expected, expected - set(got))
                for t, span_ids in got.items():
                    assert sorted(span_ids) == sorted(emitted[t]), f"trace {t} not whole"
            print(
                f"tail sampling: {len(failed)} failed of {len(bds)} kept, and "
                f"{len(expected - failed)} of {len(ok)} ok at {percent}%"
            )
            # spanmetrics counted every span, before the sampler.
            total = sum(map(len, emitted.values()))
            wait_until(
                f"spanmetrics calls == {total}",
                lambda: (
                    sum(p["value"] for p in _last_points(metrics, "traces.span.metrics.calls"))
                    == total
                ),
                timeout_s=30,
            )
    finally:
        if run is not None:
            run.close()
        stack.stop()


def _last_points(sink: OTLPReceiver, name: str) -> list[dict[str, Any]]:
    """The latest cumulative point of each series of metric ``name``."""
    last: dict[str, dict[str, Any]] = {}
    for p in sink.metric_points(name):
        key = json.dumps([p["attributes"], p["resource"]], sort_keys=True, default=str)
        if key not in last or p["time_ns"] >= last[key]["time_ns"]:
            last[key] = p
    return list(last.values())


def test_two_tiers_route_whole_traces_and_a_dead_gateway_loses_what_the_agent_reports(
    tmp_path: Path, sinks: Any
) -> None:
    need("otelcol")
    sink_a, sink_b, tempo, metrics = sinks.new(), sinks.new(), sinks.new(), sinks.new()
    stack = Stack(tmp_path)
    run = None
    try:
        everything = {"TAIL_SAMPLING_BASELINE_PERCENT": "100"}  # routing is under test here
        gw_a = stack.collector(
            "gateway.yaml",
            _gateway_env(sink_a, tempo, metrics, HOSTNAME="gateway-a", **everything),
            "gateway-a",
        )
        gw_b = stack.collector(
            "gateway.yaml",
            _gateway_env(sink_b, tempo, metrics, HOSTNAME="gateway-b", **everything),
            "gateway-b",
        )
        a, b = (f"127.0.0.1:{g.ports['otlp_grpc']}" for g in (gw_a, gw_b))
        agent = stack.collector(
            "agent.yaml",
            {
                "OTELCOL_GATEWAYS": f"[{a}, {b}]",
                "OTELCOL_METRICS_GATEWAY": a,
                "OTELCOL_GATEWAY_RETRY_MAX_ELAPSED": "6s",  # >= the first retry interval, 5 s,
            },
            "agent",
        )
        with stack.logs_on_failure():
            run = ToyRun(f"http://127.0.0.1:{agent.ports['otlp_grpc']}", tmp_path)
            # 1. Both gateways up: every trace whole in exactly one of them.
            first = {x["trace_id"] for x in run.batch(40)}
            emitted = run.emitted()
            spans_1 = sum(len(emitted[t]) for t in first)
            wait_until(
                "every trace of the first batch at a gateway's exporter",
                lambda: (
                    sum(len(v) for s in (sink_a, sink_b) for v in received(s).values()) >= spans_1
                ),
                timeout_s=60,
            )
            got_a, got_b = received(sink_a), received(sink_b)
            assert set(got_a) | set(got_b) == first and not set(got_a) & set(got_b)
            for got in (got_a, got_b):
                for t, span_ids in got.items():
                    assert sorted(span_ids) == sorted(emitted[t]), f"trace {t} split or partial"
            assert got_a and got_b, "one gateway got every trace"
            print(f"two tiers: {len(got_a)} traces at gateway a, {len(got_b)} at gateway b")
            wait_until("the in-flight record through the agent to gateway a",
                       lambda: _accepted(gw_a, "log_records") >= 1, timeout_s=30)  # fmt: skip

            # 2. Gateway b dies holding nothing (its traces were exported above); the run goes on.
            accepted_before = _accepted(agent), _accepted(gw_a)
            gw_b.kill()
            second = {x["trace_id"] for x in run.batch(40)}
            emitted = run.emitted()
            spans_2 = sum(len(emitted[t]) for t in second)
            # The agent drops b's share once its retries run out (6 s here); gateway a
            # exports its share decision_wait after each trace's first span.

            def settled() -> bool:
                arrived = sum(len(v) for t, v in received(sink_a).items() if t in second)
                return arrived + _dropped_items(agent) == spans_2

            wait_until("every span of the second batch arrived or dropped", settled, 60)
            time.sleep(float(DECISION_WAIT[:-1]) + 1)  # and nothing more comes
            dropped = _dropped_items(agent)
            arrived_2 = {t: v for t, v in received(sink_a).items() if t in second}
            lost = spans_2 - sum(len(v) for v in arrived_2.values())
            agent_in = _accepted(agent) - accepted_before[0]
            gateways_in = _accepted(gw_a) - accepted_before[1]
            print(
                f"gateway b killed: {len(second)} traces, {spans_2} spans sent; "
                f"{len(arrived_2)} traces / {spans_2 - lost} spans arrived via gateway a; "
                f"{lost} spans lost; the agent accepted {agent_in:g}, gateway a {gateways_in:g}; "
                f"agent log: dropped_items {dropped}"
            )
            assert 0 < lost < spans_2
            # What the Collectors' own metrics say was lost: accepted by the agent and by no
            # gateway (the agent's exporter metrics count these spans as sent).
            assert agent_in == spans_2
            assert agent_in - gateways_in == lost
            assert dropped == lost
            for t, span_ids in arrived_2.items():
                assert sorted(span_ids) == sorted(emitted[t]), f"trace {t} partial"
            # 3. Still going: a third batch's gateway-a share arrives.
            third = {x["trace_id"] for x in run.batch(10)}
            wait_until(
                "the third batch at gateway a",
                lambda: set(received(sink_a)) & third,
                timeout_s=30,
            )
    finally:
        if run is not None:
            run.close()
        stack.stop()


def _accepted(col: Server, what: str = "spans") -> float:
    return collector_metric(col, f"otelcol_receiver_accepted_{what}")


def _dropped_items(col: Server) -> int:
    """Items the Collector's log says it dropped after its retries ran out."""
    total = 0
    for line in col.log.read_text(errors="replace").splitlines():
        if "Dropping data." in line and '"dropped_items"' in line:
            total += int(line.split('"dropped_items": ', 1)[1].split("}")[0].split(",")[0])
    return total
