"""The package's public names are imported on first use: each resolves, and a light user
of a submodule (``otel-rollout report`` reading files) does not load the SDK pipeline."""

from __future__ import annotations

import subprocess
import sys

import otel_rollout


def test_every_public_name_resolves_to_where_it_is_defined():
    from otel_rollout._accounting.breakdown import Breakdown
    from otel_rollout._setup.config import configure

    for name in otel_rollout.__all__:
        assert getattr(otel_rollout, name) is not None, name
    assert otel_rollout.Breakdown is Breakdown
    assert otel_rollout.configure is configure
    assert set(otel_rollout.__all__) <= set(dir(otel_rollout))


def test_an_unknown_name_is_an_attribute_error():
    try:
        otel_rollout.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("no AttributeError")


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
