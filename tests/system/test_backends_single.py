"""Single tier, end to end, on the real binaries: the demo's OTLP -> the Collector
(collector-config/collector.yaml) -> Jaeger v2 (deploy/jaeger.yaml) and Prometheus 3
(collector-config/prometheus.yml, OTLP ingestion), with Tempo's place taken by a stand-in
speaking Tempo's documented API (tests/_support/_tempo_api.py).

One demo run (module-scoped) feeds every test: trajectories whole in Jaeger, `report`
from Jaeger and from the Tempo API equal to the online breakdowns, the histograms and
spanmetrics in Prometheus 3, an exemplar naming a trace Jaeger returns, and every
dashboard expression returning data, and the Collector accepting the in-flight records
(OTLP logs).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import urllib.parse
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from _backends import ROOT, Stack, collector_metric, get_json, need, prom_query, wait_until
from _tempo_api import TempoAPI

pytest.importorskip("skyrl_gym")

from otel_rollout.report import read_source, read_trace_file

N = 16
SERVICE = "otel-rollout-demo"


def _emitted(trace_file: Path) -> dict[str, set[str]]:
    """trace id -> span ids, of every span the demo process wrote to its own file."""
    out: dict[str, set[str]] = {}
    for line in trace_file.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for sp in ss["spans"]:
                    out.setdefault(sp["traceId"].lower(), set()).add(sp["spanId"].lower())
    return out


class Run:
    stack: Stack
    prom: Any
    jaeger: Any
    otelcol: Any
    tempo: TempoAPI
    online: list[dict[str, Any]]
    emitted: dict[str, set[str]]
    workdir: Path

    @property
    def jaeger_url(self) -> str:
        return f"http://127.0.0.1:{self.jaeger.ports['query_http']}"

    def jaeger_span_ids(self, trace_id: str) -> set[str]:
        doc = get_json(f"{self.jaeger_url}/api/traces/{trace_id}")
        return {s["spanID"] for t in doc["data"] for s in t["spans"]}


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory):
    need("otelcol", "jaeger", "prometheus")
    work = tmp_path_factory.mktemp("single")
    stack = Stack(work)
    tempo = TempoAPI().start()
    r = Run()
    r.stack, r.tempo, r.workdir = stack, tempo, work
    try:
        r.prom = stack.prometheus()
        r.jaeger = stack.jaeger()
        r.otelcol = stack.collector(
            "collector.yaml",
            {
                "JAEGER_OTLP_ENDPOINT": f"127.0.0.1:{r.jaeger.ports['otlp_grpc']}",
                "TEMPO_OTLP_ENDPOINT": f"127.0.0.1:{tempo.grpc_port}",
                "PROMETHEUS_OTLP_URL": (
                    f"http://127.0.0.1:{r.prom.ports['http']}/api/v1/otlp/v1/metrics"
                ),
                "SPANMETRICS_FLUSH_INTERVAL": "1s",
            },
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
        env.update(
            PYTHONPATH=str(ROOT),
            OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{r.otelcol.ports['otlp_grpc']}",
            OTEL_SERVICE_NAME=SERVICE,
            # Pushes while the run goes, so rate() over the dashboard's windows has points.
            OTEL_METRIC_EXPORT_INTERVAL="1000",
            # In-flight records often, so some go out while the demo runs.
            OTEL_ROLLOUT_IN_FLIGHT_INTERVAL_S="0.05",
            OTEL_BLRP_SCHEDULE_DELAY="50",
        )
        out = work / "demo"
        out.mkdir()
        with stack.logs_on_failure():
            res = subprocess.run(
                [
                    sys.executable,
                    str(ROOT / "tests" / "_support" / "_traced_run.py"),
                    "demo",
                    str(N),
                    "4",
                    str(out),
                ],
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            assert res.returncode == 0, f"demo failed:\n{res.stdout}{res.stderr}"
        doc = json.loads((out / "online.json").read_text())
        r.online = doc["breakdowns"]
        r.emitted = _emitted(Path(doc["trace_file"]))
        assert len(r.online) == N and doc["errors"] == 0
        assert "not accepted by" not in res.stderr  # the Collector took the log records
        assert set(r.emitted) >= {b["trace_id"] for b in r.online}
        yield r
    finally:
        stack.stop()
        tempo.stop()


def test_every_trajectory_arrives_whole_in_jaeger(run: Run) -> None:
    with run.stack.logs_on_failure():
        for trace_id, span_ids in run.emitted.items():
            wait_until(
                f"trace {trace_id} whole in Jaeger ({len(span_ids)} spans)",
                lambda t=trace_id, s=span_ids: run.jaeger_span_ids(t) == s,
                timeout_s=60,
            )
        services = get_json(f"{run.jaeger_url}/api/services")["data"]
        assert SERVICE in services


def _by_trace(bds: list[Any]) -> dict[str, dict[str, int]]:
    return {b.trace_id: dict(b.nanos) for b in bds}


def _wait_whole(run: Run) -> None:
    for trace_id, span_ids in run.emitted.items():
        wait_until(
            f"trace {trace_id} in Jaeger",
            lambda t=trace_id, s=span_ids: run.jaeger_span_ids(t) == s,
            timeout_s=60,
        )


def test_the_collector_accepts_the_in_flight_records(run: Run) -> None:
    accepted = collector_metric(run.otelcol, "otelcol_receiver_accepted_log_records")
    refused = collector_metric(run.otelcol, "otelcol_receiver_refused_log_records")
    print(f"in-flight records accepted by the Collector: {accepted:g}")
    assert accepted > 0 and refused == 0


def test_report_from_jaeger_equals_the_online_breakdowns(run: Run) -> None:
    online = {b["trace_id"]: b["nanos"] for b in run.online}
    with run.stack.logs_on_failure():
        _wait_whole(run)
        # The Jaeger base URL: read through its OTLP API (/api/v3/traces), nanoseconds kept.
        got = read_source(run.jaeger_url, service=SERVICE)
        assert not got.incomplete
        assert _by_trace(got.breakdowns) == online
        # A /api/traces URL (Jaeger's JSON, microseconds): equal within the rounding, which
        # is at most 2 us per span endpoint (start and duration each truncated to 1 us).
        url = f"{run.jaeger_url}/api/traces?" + urllib.parse.urlencode(
            {"service": SERVICE, "limit": 1000}
        )
        got_us = _by_trace(read_source(url).breakdowns)
        assert set(got_us) == set(online)
        worst = 0
        for tid, nanos in online.items():
            bound = 4_000 * len(run.emitted[tid])
            for band, ns in nanos.items():
                diff = abs(got_us[tid][band] - ns)
                worst = max(worst, diff)
                assert diff <= bound, (tid, band, ns, got_us[tid][band])
        print(f"/api/traces vs online: worst band difference {worst} ns")


def test_report_cli_from_jaeger(run: Run, capsys: pytest.CaptureFixture[str]) -> None:
    from otel_rollout._accounting.summary import summarize
    from otel_rollout.cli import main

    _wait_whole(run)
    assert main(["report", run.jaeger_url, "--service", SERVICE, "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["trajectories"] == N and out["incomplete"] == 0
    offline = summarize(read_trace_file(_trace_file(run)).breakdowns)
    for key, value in offline.items():
        assert out[key] == pytest.approx(value, abs=1e-9), key


def _trace_file(run: Run) -> Path:
    return next((run.workdir / "demo").glob("traces-*.jsonl"))


def test_report_from_the_tempo_api_equals_the_online_breakdowns(run: Run) -> None:
    online = {b["trace_id"]: b["nanos"] for b in run.online}
    with run.stack.logs_on_failure():
        wait_until(
            "every span at the Tempo endpoint",
            lambda: len(run.tempo.spans()) >= sum(map(len, run.emitted.values())),
        )
        url = f"{run.tempo.api_url}/api/search?" + urllib.parse.urlencode(
            {"tags": f"service.name={SERVICE}"}
        )
        got = read_source(url)
        assert not got.incomplete
        assert _by_trace(got.breakdowns) == online


# --- Prometheus 3 ----------------------------------------------------------------------------


def _wait_prom(run: Run, expr: str, ok: Any, timeout_s: float = 60) -> float:
    def probe() -> float | None:
        res = prom_query(run.prom, expr)
        if len(res) == 1 and ok(float(res[0]["value"][1])):
            return float(res[0]["value"][1]) or 1e-300
        # not yet: the failure names what Prometheus held last
        raise ValueError(f"{len(res)} series: {[r['value'][1] for r in res][:5]}")

    return wait_until(f"{expr} in Prometheus", probe, timeout_s)


def test_prometheus_holds_the_histograms_and_spanmetrics(run: Run) -> None:
    with run.stack.logs_on_failure():
        _wait_prom(run, "sum(rollout_trajectory_duration_seconds_count)", lambda v: v == N)
        per_env = prom_query(
            run.prom, "sum by (rollout_env_class) (rollout_trajectory_duration_seconds_count)"
        )
        counts = {r["metric"]["rollout_env_class"]: float(r["value"][1]) for r in per_env}
        assert counts == {
            env: float(sum(1 for b in run.online if b["env_class"] == env))
            for env in {b["env_class"] for b in run.online}
        }
        # spanmetrics: one call per span, by span name and our dimensions.
        total_spans = sum(map(len, run.emitted.values()))
        _wait_prom(run, "sum(traces_span_metrics_calls_total)", lambda v: v == total_spans)
        phase_series = prom_query(
            run.prom, "sum by (rollout_phase) (traces_span_metrics_duration_seconds_count)"
        )
        phases = Counter(
            {r["metric"].get("rollout_phase", ""): float(r["value"][1]) for r in phase_series}
        )
        assert {"llm", "env", "env_setup", "env_teardown"} <= set(phases), phases
        resource = prom_query(run.prom, "rollout_trajectory_duration_seconds_count")
        assert all("rollout_run_id" in r["metric"] for r in resource), resource[:1]


def test_an_exemplar_names_a_trace_jaeger_returns(run: Run) -> None:
    with run.stack.logs_on_failure():
        _wait_prom(run, "sum(rollout_trajectory_duration_seconds_count)", lambda v: v == N)
        end = time.time() + 60
        qs = urllib.parse.urlencode(
            {"query": "rollout_trajectory_duration_seconds_bucket", "start": end - 3600, "end": end}
        )

        def exemplar_ids() -> set[str]:
            body = get_json(
                f"http://127.0.0.1:{run.prom.ports['http']}/api/v1/query_exemplars?{qs}"
            )
            return {
                e["labels"].get("trace_id", "")
                for series in body["data"]
                for e in series["exemplars"]
            } - {""}

        ids = wait_until("an exemplar on the duration histogram", exemplar_ids)
        online_ids = {b["trace_id"] for b in run.online}
        assert ids <= online_ids, ids - online_ids
        tid = sorted(ids)[0]
        assert run.jaeger_span_ids(tid) == run.emitted[tid]


def _deploy_checks() -> Any:
    """tests/cli/test_deploy.py, where the dashboards' PromQL is read (imported once)."""
    import importlib.util

    mod = sys.modules.get("test_deploy")
    if mod is None:
        path = ROOT / "tests" / "cli" / "test_deploy.py"
        spec = importlib.util.spec_from_file_location("test_deploy", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules["test_deploy"] = mod
        spec.loader.exec_module(mod)
    return mod


def test_every_dashboard_expression_returns_data(run: Run) -> None:
    deploy = _deploy_checks()
    _substitute, dashboard_promql = deploy._substitute, deploy.dashboard_promql

    with run.stack.logs_on_failure():
        _wait_prom(run, "sum(rollout_trajectory_duration_seconds_count)", lambda v: v == N)
        empty, nan_only = [], []
        queries = dashboard_promql()
        assert len(queries) >= 10
        for where, expr in queries:
            res = prom_query(run.prom, _substitute(expr))
            if not res:
                empty.append(f"{where}: {expr}")
            elif all(math.isnan(float(r["value"][1])) for r in res):
                nan_only.append(f"{where}: {expr}")
        assert not empty, "no data:\n  " + "\n  ".join(empty)
        assert not nan_only, "only NaN:\n  " + "\n  ".join(nan_only)


def test_jaeger_shows_each_trajectory_linked_to_its_batch_span(run: Run) -> None:
    _wait_whole(run)
    batch_id = {b.get("batch_id") for b in run.online}
    assert len(batch_id) == 1 and None not in batch_id
    linked = set()
    for b in run.online:
        (trace,) = get_json(f"{run.jaeger_url}/api/traces/{b['trace_id']}")["data"]
        (root,) = [s for s in trace["spans"] if not any(
            r["refType"] == "CHILD_OF" for r in s.get("references", []))]  # fmt: skip
        refs = [r for r in root["references"] if r["refType"] == "FOLLOWS_FROM"]
        assert len(refs) == 1, root["references"]  # the span link, as Jaeger shows it
        linked.add((refs[0]["traceID"], refs[0]["spanID"]))
    ((batch_trace, batch_span),) = linked  # every root links to the same span...
    (trace,) = get_json(f"{run.jaeger_url}/api/traces/{batch_trace}")["data"]
    (span,) = [s for s in trace["spans"] if s["spanID"] == batch_span]
    tags = {t["key"]: t["value"] for t in span["tags"]}
    assert span["operationName"] == "batch"  # ...the batch span, with the batch's figures
    assert tags["rollout.batch.id"] in batch_id and tags["rollout.batch.trajectories"] == N
    assert tags["rollout.batch.capacity"] >= 1 and tags["rollout.batch.drain_time"] >= 0
    parts = [v for k, v in tags.items() if k.startswith("rollout.batch.slot.")]
    assert len(parts) == 6 and abs(sum(parts) - 1) < 1e-9  # the slot account
