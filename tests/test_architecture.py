"""The house's rules, checked: imports only point down the layers, no import circles, no
module-level mutable registries in the core (state belongs to an object that is passed),
and the package type-checks clean.

The layers and the circle rule are import-linter contracts in ``pyproject.toml``; this runs
``lint-imports`` on them, so an arrow that points up or closes a circle fails the suite.
The types: mypy with ``pyproject.toml``'s ``[tool.mypy]`` settings, on ``otel_rollout``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import pkgutil
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORE = ("_settings", "_base", "_accounting", "_processing", "_export", "_api", "_setup")

#: Module-level mutable state that is process-wide by nature, each with why.
ALLOWED_STATE = {
    # log once per kind and process, as the warnings module does
    ("otel_rollout._base.errors", "_seen"): "internal errors are logged once per kind",
    ("otel_rollout._settings.table", "_warned"): "a bad variable is reported once",
    ("otel_rollout._settings.spelling", "_warned"): "a misspelled variable is reported once",
    ("otel_rollout._export.guarded", "_quieted_loggers"): "the outage filter is on a logger once",
    # one interpreter-exit hook flushes every handle still open
    ("otel_rollout._setup.rollout", "_exit_registry"): "atexit is process-wide",
    # the event loop's callback runner is patched once per process
    ("otel_rollout._processing.loopstall", "_STATES"): "the asyncio patch is process-wide",
    # signal handlers are the process's: the ones chained to, and what each signal does
    ("otel_rollout._setup.preemption", "_previous"): "signal handlers are process-wide",
    ("otel_rollout._setup.preemption", "_actions"): "signal handlers are process-wide",
    # the steps open in the process: current_step() outside the step's context (a
    # trainer's timer in a task made before the step) falls back to them, as a ContextVar
    ("otel_rollout._api.step_context", "_open"): "open steps are the process's",
    # which SDK span classes the fast encoder can read directly: a cache by class
    ("otel_rollout._base.sdk_access", "_PLAIN"): "a cache keyed by span class",
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


def test_the_package_type_checks_clean():
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy (in the dev extra) is not installed")
    # mypy's cache outside the checkout, one per checkout: seconds once warm, ~15 s of CPU cold
    key = hashlib.sha256(str(ROOT).encode()).hexdigest()[:12]
    cache = Path(tempfile.gettempdir()) / f"otel-rollout-mypy-{key}"
    cmd = [sys.executable, "-m", "mypy", "--cache-dir", str(cache), "otel_rollout"]
    run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]


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
