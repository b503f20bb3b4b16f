"""The ``otel-rollout`` command line."""

from __future__ import annotations

import json

import pytest

from otel_rollout.cli import main


def test_example_writes_a_trace_file_and_prints_the_summary(tmp_path, monkeypatch, capsys):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["example", "-n", "5"]) == 0
    out = capsys.readouterr().out
    assert "generate/frac_time_in_env" in out and "5 trajectories" in out
    (trace_file,) = (tmp_path / "otel-rollout-output").glob("traces-*.jsonl")
    roots = [
        s
        for line in trace_file.read_text().splitlines()
        for rs in json.loads(line)["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
        if s["name"] == "trajectory"
    ]
    assert len(roots) == 5


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "example" in capsys.readouterr().out


def test_help_describes_the_commands(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    assert "traced rollout" in capsys.readouterr().out


def test_version_and_help_name_every_command(capsys):
    from otel_rollout import __version__

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"otel-rollout {__version__}"
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(cmd in out for cmd in ("example", "demo", "report"))
