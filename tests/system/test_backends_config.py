"""The shipped backend configs against the real binaries, and one set of versions.

Every collector-config/*.yaml passes the built Collector's `otelcol validate`,
deploy/jaeger.yaml the built Jaeger v2's, and collector-config/prometheus.yml Prometheus
3's `promtool check config`, each file as shipped (compose's defaults for every address).
compose.yaml runs the releases deploy/backends/build.sh builds, and the Collector's
builder manifest holds exactly the components the configs name (plus `debug`).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from _backends import BACKENDS, CFG, JAEGER_CONFIG, PROMETHEUS_CONFIG, ROOT, need, versions

COLLECTOR_CONFIGS = sorted(
    p
    for p in CFG.glob("*.yaml")
    if "pipelines" in (yaml.safe_load(p.read_text()).get("service") or {})
)
MANIFEST = BACKENDS / "otelcol-builder.yaml"


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    # No OTEL_*/address variables: the files' own defaults (compose's values) apply.
    env = {"PATH": "/usr/bin:/bin", "HOME": str(Path.home())}
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env, check=False)


@pytest.mark.parametrize("path", COLLECTOR_CONFIGS, ids=lambda p: p.name)
def test_otelcol_validate(path: Path) -> None:
    otelcol = need("otelcol")["otelcol"]
    res = _run([str(otelcol), "validate", f"--config={path}"])
    assert res.returncode == 0, f"otelcol validate {path.name}:\n{res.stdout}{res.stderr}"
    # A renamed or deprecated key still validates but warns: the configs stay current.
    assert "deprecated" not in (res.stdout + res.stderr).lower(), res.stdout + res.stderr


def test_jaeger_validate() -> None:
    jaeger = need("jaeger")["jaeger"]
    res = _run([str(jaeger), "validate", f"--config={JAEGER_CONFIG}"])
    assert res.returncode == 0, f"jaeger validate:\n{res.stdout}{res.stderr}"


def test_promtool_check_config_prometheus_3() -> None:
    promtool = need("promtool")["promtool"]
    res = _run([str(promtool), "check", "config", str(PROMETHEUS_CONFIG)])
    assert res.returncode == 0, f"promtool check config:\n{res.stdout}{res.stderr}"
    version = _run([str(promtool), "--version"])
    assert f"version {versions()['PROMETHEUS_VERSION']}" in version.stdout + version.stderr


def _image_tags() -> dict[str, set[str]]:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    tags: dict[str, set[str]] = {}
    for svc in compose["services"].values():
        image = svc.get("image", "")
        if ":" in image:
            name, tag = image.rsplit(":", 1)
            tags.setdefault(name, set()).add(tag)
    return tags


def test_compose_runs_the_built_releases() -> None:
    v = versions()
    tags = _image_tags()
    assert tags["otel/opentelemetry-collector-contrib"] == {v["OTELCOL_VERSION"]}
    assert tags["jaegertracing/jaeger"] == {v["JAEGER_VERSION"]}
    assert tags["prom/prometheus"] == {f"v{v['PROMETHEUS_VERSION']}"}
    # The Prometheus module v0.3XX.Y is Prometheus 3.XX.Y.
    major_minor = re.fullmatch(r"0\.3(\d\d)\.(\d+)", v["PROMETHEUS_MODULE_VERSION"])
    assert major_minor, v["PROMETHEUS_MODULE_VERSION"]
    assert v["PROMETHEUS_VERSION"] == f"3.{int(major_minor[1])}.{major_minor[2]}"


def _component_types(cfg: dict, kind: str) -> set[str]:
    return {name.split("/")[0] for name in (cfg.get(kind) or {})}


def test_builder_manifest_has_exactly_the_components_the_configs_use() -> None:
    manifest = yaml.safe_load(MANIFEST.read_text())
    v = versions()
    built: dict[str, set[str]] = {}
    for kind in ("receivers", "processors", "exporters", "connectors", "extensions"):
        for entry in manifest[kind]:
            module, version = entry["gomod"].split()
            assert version == f"v{v['OTELCOL_VERSION']}", entry
            # Module names end in <type><kind>, e.g. .../processor/tailsamplingprocessor.
            last = module.rsplit("/", 1)[1]
            built.setdefault(kind, set()).add(
                re.sub(r"(receiver|processor|exporter|connector|extension)$", "", last)
            )
    for entry in manifest["providers"]:
        assert entry["gomod"].split()[1] == f"v{v['OTELCOL_CONFMAP_VERSION']}", entry
    used: dict[str, set[str]] = {}
    for path in COLLECTOR_CONFIGS:
        cfg = yaml.safe_load(path.read_text())
        for kind in built:
            used.setdefault(kind, set()).update(_component_types(cfg, kind))
    aliases = {
        "healthcheck": "health_check",
        "memorylimiter": "memory_limiter",
        "tailsampling": "tail_sampling",
    }
    built = {k: {aliases.get(t, t) for t in ts} for k, ts in built.items()}
    assert built == used
