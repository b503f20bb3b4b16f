"""The package's public surface: ``otel_rollout`` holds what an agent loop uses, imported
on first use (a light user of a submodule, ``otel-rollout report`` reading files, does not
load the SDK pipeline); the pipeline's parts are in ``otel_rollout.sdk``, the pure
accounting in ``otel_rollout.accounting``; no name is public twice."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import otel_rollout
import otel_rollout.accounting
import otel_rollout.attributes
import otel_rollout.instrumentation
import otel_rollout.sdk

#: What an agent loop uses: configure, the verbs, their handles, the summary.
LOOP = {
    "__version__", "configure", "Rollout", "ConfigError", "get_rollout", "RolloutTracer",
    "trajectory", "batch", "step", "phase", "current_trajectory", "current_batch",
    "current_step", "TrajectoryHandle", "BatchHandle", "StepHandle", "PhaseHandle",
    "Generation", "run_in_executor", "bind_context", "summarize", "analyze_batch",
    "Breakdown", "BreakdownCollector",
}  # fmt: skip

#: The pipeline's parts, for a pipeline built by hand.
SDK = {
    "BreakdownProcessor", "TailKeepProcessor", "RecordingRatioSampler",
    "GenAIMetricsProcessor", "ConsoleTreeExporter", "guarded_span_processor", "ExportStats",
    "configure_loop_stalls", "Settings",
}  # fmt: skip

ACCOUNTING = {
    "compute_breakdown", "outermost_phases", "SpanRecord", "PhaseInterval", "step_account",
    "StepAccount", "BatchAnalysis", "StepFunction", "BatchAccumulator", "mark_consumed",
    "group_by", "group_by_batch", "DEFAULT_BANDS", "Band", "BandRegistry",
}  # fmt: skip


def test_the_top_level_holds_what_an_agent_loop_uses_and_nothing_else():
    assert set(otel_rollout.__all__) == LOOP
    assert set(otel_rollout.sdk.__all__) == SDK
    assert set(otel_rollout.accounting.__all__) == ACCOUNTING


def test_every_public_name_resolves_to_where_it_is_defined():
    from otel_rollout._accounting.breakdown import Breakdown
    from otel_rollout._api.trajectory import Trajectory
    from otel_rollout._processing.breakdown_processor import BreakdownProcessor
    from otel_rollout._setup.config import configure

    for module in (otel_rollout, otel_rollout.sdk, otel_rollout.accounting):
        for name in module.__all__:
            assert getattr(module, name) is not None, (module.__name__, name)
        assert set(module.__all__) <= set(dir(module))
    assert otel_rollout.Breakdown is Breakdown
    assert otel_rollout.configure is configure
    assert otel_rollout.TrajectoryHandle is Trajectory
    assert otel_rollout.sdk.BreakdownProcessor is BreakdownProcessor


@pytest.mark.parametrize(
    "name",
    ["BreakdownProcessor", "compute_breakdown", "BANDS", "Trajectory", "Batch", "Phase",
     "no_such_name"],
)  # fmt: skip
def test_a_name_that_is_not_public_here_is_an_attribute_error_naming_it(name):
    with pytest.raises(AttributeError, match=name):
        getattr(otel_rollout, name)


def test_no_name_is_public_in_two_modules():
    modules = [otel_rollout, otel_rollout.sdk, otel_rollout.accounting,
               otel_rollout.instrumentation]  # fmt: skip
    seen: dict[str, str] = {}
    for module in modules:
        for name in module.__all__:
            assert name not in seen, f"{name} is public in {seen[name]} and {module.__name__}"
            seen[name] = module.__name__


def test_no_object_is_public_twice_under_any_name():
    names = ["otel_rollout.testing", "otel_rollout.wandb", "otel_rollout.integrations",
             *(f"otel_rollout.integrations.{n}"
               for n in ("ray", "vllm", "skyrl", "verl", "verifiers", "areal"))]  # fmt: skip
    modules = [otel_rollout, otel_rollout.sdk, otel_rollout.accounting,
               otel_rollout.attributes, otel_rollout.instrumentation]  # fmt: skip
    for name in names:
        try:
            modules.append(importlib.import_module(name))
        except ImportError:  # an extra that is not installed here
            continue
    where: dict[int, str] = {}
    for module in modules:
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if isinstance(value, str | int | float | tuple | frozenset) or value is None:
                continue  # equal constants are not one object by design
            here = f"{module.__name__}.{name}"
            assert id(value) not in where, f"{here} is {where[id(value)]}"
            where[id(value)] = here


def test_the_report_reads_files_without_the_sdk_pipeline():
    code = (
        "import sys\n"
        "import otel_rollout.cli, otel_rollout.report._command, otel_rollout.report._sources\n"
        "heavy = [m for m in ('opentelemetry.sdk.trace', 'urllib.request',\n"
        "         'otel_rollout._setup.config') if m in sys.modules]\n"
        "print(heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_installing_the_package_loads_no_pytest_plugin_into_other_test_runs():
    import tomllib
    from pathlib import Path

    pyproject = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    entry_points = pyproject["project"].get("entry-points", {})
    assert "pytest11" not in entry_points, entry_points.get("pytest11")


def test_the_plugin_raises_internal_errors_only_where_it_was_opted_into(tmp_path):
    (tmp_path / "test_probe.py").write_text(
        "from otel_rollout._base import errors\n"
        "def test_probe():\n"
        "    print('RAISES', errors._raise)\n"
    )
    runs = {}
    for opt_in in ([], ["-p", "otel_rollout.testing"]):
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
             "-p", "no:otel_rollout", *opt_in, str(tmp_path / "test_probe.py")],
            capture_output=True, text=True, cwd=tmp_path,
        )  # fmt: skip
        runs[bool(opt_in)] = out.stdout
    assert "RAISES False" in runs[False], runs[False]
    assert "RAISES True" in runs[True], runs[True]
