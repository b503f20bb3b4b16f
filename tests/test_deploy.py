"""Deployment files: promtool on prometheus.yml; Collector pipelines name defined components."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CFG = ROOT / "collector-config"


def test_promtool_check_config() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool absent (Debian package `prometheus`; .ci/run installs it)")
    subprocess.run([promtool, "check", "config", str(CFG / "prometheus.yml")], check=True)


def test_collector_pipelines_name_defined_components() -> None:
    cfg = yaml.safe_load((CFG / "collector.yaml").read_text())
    for name, pipe in cfg["service"]["pipelines"].items():
        for kind in ("receivers", "processors", "exporters"):
            for comp in pipe.get(kind, []):
                defined = set(cfg.get(kind) or {}) | set(cfg.get("connectors") or {})
                assert comp in defined, f"pipeline {name} names undefined {kind[:-1]} {comp}"
