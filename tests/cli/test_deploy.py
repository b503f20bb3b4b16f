"""Deployment files agree with each other and with what the project emits.

No Docker engine here, so compose itself is not run (the backends it runs are, built from
source: tests/system/test_backends*.py). Here: the compose file against the Compose spec's JSON
schema; a consistency check (mounted files exist, Collector pipelines name defined components,
every endpoint names a compose service and a port it listens on, Grafana data sources
and dashboard agree); and every PromQL expression of the Grafana dashboard executed
against a real Prometheus scraping a real demo run.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml
from _prom import Prometheus, prometheus, python

__all__ = ["prometheus"]  # the fixture, imported from _prom

ROOT = Path(__file__).resolve().parents[2]
CFG = ROOT / "collector-config"
DEPLOY = ROOT / "deploy"
COMPOSE = ROOT / "compose.yaml"
DASHBOARDS = sorted((DEPLOY / "grafana" / "dashboards").glob("*.json"))
DATASOURCES = DEPLOY / "grafana" / "provisioning" / "datasources" / "datasources.yaml"

#: Ports the images listen on by default, for services whose ports are not in a config
#: file of ours (Prometheus and Grafana: their HTTP port). Collector, Jaeger and Tempo
#: ports are read from their mounted configs.
IMAGE_PORTS = {
    "prom/prometheus": {9090},
    "grafana/grafana": {3000},
}


def _load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def _interpolate(s: str) -> str:
    """Compose variable interpolation with every variable unset: ${X:-d} -> d."""

    def sub(m: re.Match) -> str:
        body = m.group(1)
        if ":-" in body:
            return body.split(":-", 1)[1]
        if ":?" in body or "?" in body:
            return "set-by-user"
        return ""

    return re.sub(r"\$\{([^}]*)\}", sub, s)


def _host_port(value: str) -> tuple[str, int] | None:
    """host:port from `host:port` or a URL; None when it names no port."""
    if "://" in value:
        u = urlsplit(value)
        if u.hostname is None:
            return None
        port = u.port or {"http": 80, "https": 443}.get(u.scheme)
        return (u.hostname, port) if port else None
    m = re.fullmatch(r"\[?([^\]]+?)\]?:(\d+)", value)
    return (m.group(1), int(m.group(2))) if m else None


def _load_cfg(path: Path) -> Any:
    """A Collector or Jaeger config as compose runs it: ${env:VAR:-default} -> default."""
    return yaml.safe_load(_interpolate(path.read_text()))


def _is_collector_config(path: Path) -> bool:
    cfg = _load(path)
    return isinstance(cfg, dict) and "pipelines" in (cfg.get("service") or {})


COLLECTOR_CONFIGS = sorted(p for p in CFG.glob("*.yaml") if _is_collector_config(p))


# --- (a) promtool: Prometheus 3's, in tests/system/test_backends_config.py --------------


# --- (b) compose schema ---------------------------------------------------------------------


def test_compose_validates_against_the_compose_spec() -> None:
    # The schema is vendored in check-jsonschema: no network needed.
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "check_jsonschema",
            "--builtin-schema",
            "vendor.compose-spec",
            str(COMPOSE),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, (
        f"compose.yaml is not a valid Compose file:\n{res.stdout}{res.stderr}"
    )


# --- (c) consistency ------------------------------------------------------------------------


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=lambda p: p.name)
def test_collector_pipelines_name_defined_components(path: Path) -> None:
    cfg = _load_cfg(path)
    problems = []
    connectors = set(cfg.get("connectors") or {})
    used: set[str] = set()
    for ext in cfg["service"].get("extensions", []):
        if ext not in (cfg.get("extensions") or {}):
            problems.append(f"service names undefined extension {ext}")
    for name, pipe in cfg["service"]["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for comp in pipe.get(kind, []):
                used.add(comp)
                defined = set(cfg.get(kind) or {})
                if kind != "processors":
                    defined |= connectors
                if comp not in defined:
                    problems.append(f"pipeline {name} names undefined {kind[:-1]} {comp}")
        if not pipe.get("receivers") or not pipe.get("exporters"):
            problems.append(f"pipeline {name} needs receivers and exporters")
        if "memory_limiter" in pipe.get("processors", []) and pipe["processors"][0] != (
            "memory_limiter"
        ):
            problems.append(f"pipeline {name}: memory_limiter must come first")
    for c in connectors:  # a connector joins two pipelines: exporter in one, receiver in another
        as_exp = [n for n, p in cfg["service"]["pipelines"].items() if c in p.get("exporters", [])]
        as_rec = [n for n, p in cfg["service"]["pipelines"].items() if c in p.get("receivers", [])]
        if not as_exp or not as_rec:
            problems.append(
                f"connector {c} must be an exporter and a receiver ({as_exp}, {as_rec})"
            )
    for kind in ("receivers", "processors", "exporters", "connectors"):
        for comp in cfg.get(kind) or {}:
            if comp not in used:
                problems.append(f"{kind[:-1]} {comp} is defined but in no pipeline")
    assert not problems, f"{path.name}:\n  " + "\n  ".join(problems)


def _collector_endpoints(cfg: dict) -> list[tuple[str, str]]:
    """(exporter, host:port or URL) of every exporter target in a Collector config."""
    out = []
    for name, exp in (cfg.get("exporters") or {}).items():
        exp = exp or {}
        for key in ("endpoint", "metrics_endpoint", "traces_endpoint", "logs_endpoint"):
            if key in exp:
                out.append((name, exp[key]))
        resolver = exp.get("resolver") or {}
        if "dns" in resolver:
            dns = resolver["dns"]
            out.append((name, f"{dns['hostname']}:{dns.get('port', 4317)}"))
        for host in (resolver.get("static") or {}).get("hostnames", []):
            out.append((name, host))
    return out


def _collector_listen_ports(cfg: dict) -> set[int]:
    ports = set()
    for section in ("receivers", "extensions"):
        for comp in (cfg.get(section) or {}).values():
            for proto in ((comp or {}).get("protocols") or {}).values():
                hp = _host_port((proto or {}).get("endpoint", ""))
                if hp:
                    ports.add(hp[1])
            if not isinstance(comp, dict):
                continue
            for sub in (comp, comp.get("http") or {}, comp.get("grpc") or {}):
                hp = _host_port(sub.get("endpoint", ""))
                if hp:
                    ports.add(hp[1])
    return ports


def _tempo_listen_ports(cfg: dict) -> set[int]:
    ports = {cfg.get("server", {}).get("http_listen_port", 3200)}
    for rec in cfg.get("distributor", {}).get("receivers", {}).values():
        for proto in (rec.get("protocols") or {}).values():
            hp = _host_port((proto or {}).get("endpoint", ""))
            if hp:
                ports.add(hp[1])
    return ports


class Stack:
    """compose.yaml resolved: services, their mounts, their configs and listen ports."""

    def __init__(self) -> None:
        self.compose = _load(COMPOSE)
        self.services: dict[str, dict] = self.compose["services"]
        self.problems: list[str] = []
        # service -> [(source path as written, resolved source, target)]
        self.mounts: dict[str, list[tuple[str, Path, str]]] = {}
        for name, svc in self.services.items():
            for vol in svc.get("volumes", []):
                # SOURCE:TARGET[:MODE], SOURCE possibly holding ${VAR:-default}
                m = re.fullmatch(r"((?:\$\{[^}]*\}|[^:$])+):([^:]+)(?::\w+)?", vol)
                assert m, f"{name}: cannot parse volume {vol!r}"
                src, target = m.group(1), m.group(2)
                if src.startswith((".", "/")):
                    self.mounts.setdefault(name, []).append(
                        (src, (ROOT / _interpolate(src)).resolve(), target)
                    )

    def image(self, name: str) -> str:
        return self.services[name].get("image", "")

    def is_collector(self, name: str) -> bool:
        return "opentelemetry-collector" in self.image(name)

    def collector_configs(self, name: str) -> list[Path]:
        """Every config the service can run: all variants when chosen by a variable."""
        cmd = self.services[name].get("command", [])
        flags = [c for c in cmd if c.startswith("--config=")]
        assert len(flags) == 1, f"{name}: command must pass one --config=FILE, got {cmd}"
        target = flags[0].split("=", 1)[1]
        srcs = [(raw, p) for raw, p, t in self.mounts.get(name, []) if t == target]
        if not srcs:
            self.problems.append(f"{name}: --config={target} is not a mounted file")
            return []
        raw, path = srcs[0]
        if "${" not in raw:
            return [path]
        literal = {p for svc in self.mounts.values() for r, p, _ in svc if "${" not in r}
        variants = [p for p in COLLECTOR_CONFIGS if p.resolve() not in literal]
        if path not in variants:
            self.problems.append(f"{name}: default config {path} is not a Collector config")
        return variants

    def listen_ports(self, name: str) -> set[int]:
        svc = self.services[name]
        image = self.image(name).split(":")[0]
        ports: set[int] = set(IMAGE_PORTS.get(image, set()))
        if self.is_collector(name) or image == "jaegertracing/jaeger":
            for cfg in self.collector_configs(name):
                if cfg.exists():
                    ports |= _collector_listen_ports(_load_cfg(cfg))
        if image == "grafana/tempo":
            for _, path, target in self.mounts.get(name, []):
                if target in " ".join(svc.get("command", [])) and path.exists():
                    ports |= _tempo_listen_ports(_load(path))
        return ports

    def check_target(self, where: str, value: str) -> None:
        hp = _host_port(value)
        if hp is None:
            self.problems.append(f"{where}: cannot read host:port from {value!r}")
            return
        host, port = hp
        if host not in self.services:
            self.problems.append(f"{where}: {value!r}: {host!r} is not a compose service")
            return
        listening = self.listen_ports(host)
        if port not in listening:
            self.problems.append(
                f"{where}: {value!r}: service {host} does not listen on {port} "
                f"(it listens on {sorted(listening)})"
            )


def test_compose_and_configs_agree() -> None:
    st = Stack()
    p = st.problems
    for name, svc in st.services.items():
        image = svc.get("image", "")
        if "build" not in svc:
            tag = image.rpartition(":")[2] if ":" in image else ""
            if not tag or tag == "latest":
                p.append(f"{name}: image {image!r} must be pinned to an exact version")
        if "healthcheck" not in svc and svc.get("restart") != "no":
            p.append(f"{name}: no healthcheck")
        for mapping in svc.get("ports", []):
            parts = str(mapping).split(":")
            if len(parts) != 3 or parts[0] != "127.0.0.1":
                p.append(f"{name}: published port {mapping!r} must be bound to 127.0.0.1")
                continue
            if int(parts[2]) not in st.listen_ports(name):
                p.append(f"{name}: publishes {parts[2]}, which the service does not listen on")
        for raw, path, _ in st.mounts.get(name, []):
            if not path.exists():
                p.append(f"{name}: mounted {raw} does not exist ({path})")
        env = svc.get("environment") or {}
        if "OTEL_EXPORTER_OTLP_ENDPOINT" in env:
            st.check_target(
                f"{name} OTEL_EXPORTER_OTLP_ENDPOINT",
                _interpolate(env["OTEL_EXPORTER_OTLP_ENDPOINT"]),
            )
        for dep in svc.get("depends_on") or {}:
            if dep not in st.services:
                p.append(f"{name}: depends on unknown service {dep}")
    # Collector exporters -> services and ports (every variant a service can run).
    for name in st.services:
        if st.is_collector(name):
            for cfg_path in st.collector_configs(name):
                if not cfg_path.exists():
                    continue  # reported as a missing mount
                for exp, value in _collector_endpoints(_load_cfg(cfg_path)):
                    st.check_target(f"{name} ({cfg_path.name}) exporter {exp}", value)
    # The two-tier demo endpoint named in a comment/variable must be a real service too.
    st.check_target("two-tier demo endpoint", "http://otel-agent:4317")
    # Tempo's metrics generator remote write, when turned on, goes to Prometheus.
    tempo = _load(DEPLOY / "tempo.yaml")
    for rw in tempo.get("metrics_generator", {}).get("storage", {}).get("remote_write", []):
        st.check_target("tempo.yaml remote_write", rw["url"])
    # Grafana data sources -> services and ports; the dashboard provider path is mounted.
    ds = _load(DATASOURCES)["datasources"]
    for d in ds:
        st.check_target(f"Grafana data source {d['name']}", d["url"])
    graf = st.mounts.get("grafana", [])
    targets = {t for _, _, t in graf}
    if "/etc/grafana/provisioning" not in targets:
        p.append("grafana: deploy/grafana/provisioning is not mounted at /etc/grafana/provisioning")
    provider_dir = DEPLOY / "grafana" / "provisioning" / "dashboards"
    for f in provider_dir.glob("*.yaml"):
        for prov in _load(f)["providers"]:
            path = prov["options"]["path"]
            if not any(path == t or path.startswith(t + "/") for t in targets):
                p.append(f"{f.name}: dashboards path {path} is not mounted in grafana")
    home = (st.services["grafana"].get("environment") or {}).get(
        "GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"
    )
    if home:
        src = [(s, t) for _, s, t in graf if home.startswith(t + "/")]
        if not src or not (src[0][0] / home[len(src[0][1]) + 1 :]).exists():
            p.append(f"grafana: home dashboard {home} is not a mounted file")
    # Grafana: anonymous users are Viewers; the admin password is the user's, never a default.
    genv = st.services["grafana"].get("environment") or {}
    if str(genv.get("GF_AUTH_ANONYMOUS_ENABLED", "false")).lower() == "true" and (
        genv.get("GF_AUTH_ANONYMOUS_ORG_ROLE") != "Viewer"
    ):
        p.append("grafana: anonymous access must be Viewer only")
    pw = str(genv.get("GF_SECURITY_ADMIN_PASSWORD", ""))
    login_off = str(genv.get("GF_AUTH_DISABLE_LOGIN_FORM", "")).lower() == "true"
    if not re.fullmatch(r"\$\{\w+:\?[^}]*\}", pw) and not login_off:
        p.append("grafana: admin password must come from ${VAR:?...} (no default)")
    # Dashboard data source uids exist.
    uids = {d["uid"] for d in ds}
    for dash in DASHBOARDS:
        for panel in _panels(json.loads(dash.read_text())):
            for t in [panel, *panel.get("targets", [])]:
                uid = (t.get("datasource") or {}).get("uid")
                if uid and not uid.startswith("$") and uid not in uids:
                    p.append(f"{dash.name} panel {panel.get('title')!r}: unknown data source {uid}")
    for d in ds:
        for dest in (d.get("jsonData") or {}).get("exemplarTraceIdDestinations", []):
            if dest.get("datasourceUid") not in uids:
                p.append(f"data source {d['name']}: exemplar link to unknown {dest}")
    assert not p, "deployment files disagree:\n  " + "\n  ".join(p)


# --- (d) the dashboard against a real Prometheus --------------------------------------------


def _panels(dash: dict) -> list[dict]:
    out = []
    for panel in dash.get("panels", []):
        out.append(panel)
        out.extend(panel.get("panels", []))  # collapsed rows
    return out


#: Grafana's variables, as concrete values for an instant query at the end of the run.
GRAFANA_VARS = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "5m",
    "__range_s": "300",
    "env_class": ".*",
    "model": ".*",
}


def _substitute(expr: str) -> str:
    def sub(m: re.Match) -> str:
        name = m.group(1) or m.group(2) or m.group(3)
        assert name in GRAFANA_VARS, f"unknown Grafana variable ${name} in {expr!r}"
        return GRAFANA_VARS[name]

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)", sub, expr)


def _metric_names(expr: str) -> set[str]:
    """The rollout_* metric names an expression selects (label names stripped first)."""
    bare = re.sub(r"\{[^}]*\}", "", expr)
    bare = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", bare)
    return set(re.findall(r"\brollout_\w+", bare))


def _label_names(expr: str) -> set[str]:
    """Label names an expression groups by or matches on."""
    out = set(re.findall(r"(\w+)\s*(?:=~|!~|!=|=)\s*\"", expr))
    for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", expr):
        out |= {g.strip() for g in group.split(",") if g.strip()}
    return out


def dashboard_promql() -> list[tuple[str, str]]:
    """(where, expression) for every Prometheus query in the dashboards, variables included."""
    out = []
    for dash_path in DASHBOARDS:
        dash = json.loads(dash_path.read_text())
        for panel in _panels(dash):
            for t in panel.get("targets", []):
                uid = (t.get("datasource") or panel.get("datasource") or {}).get("uid")
                if "expr" in t and uid == "prometheus":
                    out.append((f"{dash_path.name}: {panel['title']} [{t['refId']}]", t["expr"]))
        for var in dash.get("templating", {}).get("list", []):
            q = var.get("definition") or (var.get("query") or {}).get("query", "")
            m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", q.strip())
            if m:  # label_values(metric, label): the metric must have that label
                out.append((f"variable ${var['name']}", f"count by ({m[2]}) ({m[1]})"))
    return out


def test_dashboard_has_the_panels_the_rollout_needs() -> None:
    exprs = " ".join(e for _, e in dashboard_promql())
    for needle in (
        "rollout_trajectory_phase_duration_seconds_sum",
        "rollout_trajectory_phase_duration_seconds_bucket",
        "rollout_trajectory_duration_seconds_count",
        "rollout_trajectory_turns_bucket",
        'rollout_phase="env"',
        "rollout_trajectory_status",
        "histogram_quantile(0.5",
        "histogram_quantile(0.9",
    ):
        assert needle in exprs, f"no dashboard query uses {needle}"
    # Band values in matchers are real bands (a typo in an alternation still returns data).
    from otel_rollout.attributes import ALL_BANDS

    for where, expr in dashboard_promql():
        for values in re.findall(r'rollout_phase\s*=~?\s*"([^"]*)"', expr):
            bad = set(values.split("|")) - set(ALL_BANDS)
            assert not bad, f"{where}: rollout_phase values {sorted(bad)} are not bands"
    tempo = [
        t
        for d in DASHBOARDS
        for p in _panels(json.loads(d.read_text()))
        for t in p.get("targets", [])
        if (t.get("datasource") or {}).get("uid") == "tempo"
    ]
    assert any("rollout.trajectory.id" in t.get("query", "") for t in tempo), (
        "no Tempo panel lists trajectory roots"
    )


def test_dashboard_promql_returns_data(prometheus: Prometheus, tmp_path: Path) -> None:
    queries = dashboard_promql()
    assert len(queries) >= 10
    n = 96
    cli = Path(python()).with_name("otel-rollout")
    argv = [str(cli)] if cli.exists() else [python(), "-m", "otel_rollout.cli"]
    # rate() and increase() need a series scraped at two different values: one first
    # scraped at its final value has zero increase, and the dashboard's ratios and
    # quantiles are then 0/0. The demo keeps to real time; 96 trajectories four at a time
    # take about 7 s, so the 1 s scrapes see the counters grow. A run that no scrape
    # caught half-way is stated as such, not taken for a dashboard without data.
    demo = ["demo", "-n", str(n), "--concurrency", "4", "--no-progress", "--linger", "120"]
    prometheus.spawn([*argv, *demo, "--output-dir", "out"], cwd=tmp_path)
    count = "sum(rollout_trajectory_duration_seconds_count)"
    try:
        prometheus.wait_for(count, lambda v: 0 < v < n, timeout_s=60)
    except AssertionError as exc:
        raise AssertionError(f"no scrape saw the demo half-way through its run: {exc}") from exc
    # The demo lingers after its run: wait until its final counts are scraped, then two
    # more scrapes so every rate() window has points after the last change.
    prometheus.wait_for(count, lambda v: v == n, timeout_s=60)
    prometheus.wait_scrapes(2)
    emitted = prometheus.query('{__name__=~"rollout_.*"}')
    names = {r["metric"]["__name__"] for r in emitted}
    labels = {k for r in emitted for k in r["metric"]}
    empty, nan_only = [], []
    for where, expr in queries:
        concrete = _substitute(expr)
        for metric in _metric_names(concrete):
            assert metric in names, (
                f"{where}: queries {metric}, which the project does not emit "
                f"(emitted: {sorted(names)})"
            )
        for label in _label_names(concrete) - labels:
            raise AssertionError(
                f"{where}: uses label {label}, which no emitted series has ({sorted(labels)})"
            )
        res = prometheus.query(concrete)
        if not res:
            empty.append(f"{where}: {concrete}")
        elif all(math.isnan(float(r["value"][1])) for r in res):
            nan_only.append(f"{where}: {concrete}")
    assert not empty, "dashboard queries with no data:\n  " + "\n  ".join(empty)
    assert not nan_only, "dashboard queries returning only NaN:\n  " + "\n  ".join(nan_only)
