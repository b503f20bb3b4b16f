"""The house's rules, checked: imports only point down the layers, no import circles, and
no module-level mutable registries in the core (state belongs to an object that is passed).

The layers and the circle rule are import-linter contracts in ``pyproject.toml``; this runs
``lint-imports`` on them, so an arrow that points up or closes a circle fails the suite.
"""

from __future__ import annotations

import importlib
import pkgutil
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ("_settings", "_base", "_accounting", "_processing", "_export", "_api", "_setup")

#: Module-level mutable state that is process-wide by nature, each with why.
ALLOWED_STATE = {
    # log once per kind and process, as the warnings module does
    ("otel_rollout._base.errors", "_seen"): "internal errors are logged once per kind",
    ("otel_rollout._settings.table", "_warned"): "a bad variable is reported once",
    ("otel_rollout._base.quiet", "_quieted_loggers"): "the outage filter is on a logger once",
    # one interpreter-exit hook flushes every handle still open
    ("otel_rollout._setup.rollout", "_exit_registry"): "atexit is process-wide",
    # the event loop's callback runner is patched once per process
    ("otel_rollout._processing.loopstall", "_STATES"): "the asyncio patch is process-wide",
    # signal handlers are the process's: the ones chained to, and what each signal does
    ("otel_rollout._setup.preemption", "_previous"): "signal handlers are process-wide",
    ("otel_rollout._setup.preemption", "_actions"): "signal handlers are process-wide",
    # which SDK span classes the fast encoder can read directly: a cache by class
    ("otel_rollout._export.otlp_values", "_FAST"): "a cache keyed by span class",
    # resources and scopes of compact queued spans, interned once per process (bounded)
    ("otel_rollout._export.otlp_compact", "_SOURCES"): "interned, bounded, one module's",
    ("otel_rollout._export.otlp_compact", "_SOURCE_INDEX"): "interned, bounded, one module's",
}


def _lint_imports() -> str:
    exe = Path(sys.executable).with_name("lint-imports")
    return str(exe) if exe.exists() else shutil.which("lint-imports") or ""


def test_imports_point_down_the_layers_and_close_no_circle():
    exe = _lint_imports()
    if not exe:
        pytest.skip("lint-imports (the import-linter package, in the dev extra) is not installed")
    run = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def _core_modules() -> list[str]:
    names = ["otel_rollout", "otel_rollout.attributes"]
    for pkg in CORE:
        module = importlib.import_module(f"otel_rollout.{pkg}")
        names.append(module.__name__)
        names += [f"{module.__name__}.{m.name}" for m in pkgutil.iter_modules(module.__path__)]
    return names


def test_the_core_keeps_no_module_level_mutable_registry():
    allowed = {id(getattr(importlib.import_module(m), a)) for m, a in ALLOWED_STATE}
    found = []
    for name in _core_modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if attr.startswith("__") or type(value) not in (dict, list, set, bytearray):
                continue
            if id(value) not in allowed:  # an allowed one imported elsewhere is the same
                found.append(f"{name}.{attr} ({type(value).__name__})")
    assert not found, (
        "module-level mutable state: make constants read-only (MappingProxyType, tuple, "
        f"frozenset) and keep state on an object that is passed: {found}"
    )


def test_every_allowed_piece_of_state_still_exists():
    for name, attr in ALLOWED_STATE:
        assert hasattr(importlib.import_module(name), attr), f"{name}.{attr} is gone: drop it"
