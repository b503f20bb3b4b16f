"""The ``otel-rollout`` command line."""

from __future__ import annotations

import pytest

from otel_rollout.cli import main


def test_no_command_prints_help_and_fails(capsys):
    assert main([]) == 2
    assert "demo" in capsys.readouterr().out


def test_help_describes_the_commands(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    assert "traced concurrent rollout" in capsys.readouterr().out


def test_version_and_help_name_every_command(capsys):
    from otel_rollout import __version__

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"otel-rollout {__version__}"
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert all(cmd in out for cmd in ("demo", "report", "top"))
