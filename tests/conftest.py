"""Where a test goes, and what every test gets.

``tests/`` mirrors the package's layers: ``accounting/``, ``processing/``, ``export/``,
``api/``, ``setup/``, ``report/``, ``integrations/``, ``cli/`` hold fast tests of that
layer (in-memory providers, the injectable clock, at most a local receiver);
``system/`` holds what runs real systems or takes long (the Collector, Jaeger,
Prometheus, Phoenix, Ray, trainers, vLLM, memory and burst checks), each marked
``system`` here, so ``pytest -m "not system"`` runs the fast part. Helpers shared by
tests live in ``tests/_support/`` and import by bare name; ``test_architecture.py`` holds
the house's rules (imports only point down the layers, no circles, no module registries).

Every test starts with no ``OTEL_*`` variable (``OTEL_ROLLOUT_*`` included) inherited
from the machine running it; a test sets what it needs with ``monkeypatch``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _otel_env import clean_otel_env

#: otel-rollout's fixtures (``rollout_env``, ``manual_env``) and internal errors raised in
#: tests: the plugin is opt-in, so installing otel-rollout changes no one else's test run.
pytest_plugins = ["otel_rollout.testing"]

_SYSTEM = Path(__file__).parent / "system"


@pytest.fixture(autouse=True)
def _no_inherited_otel_env(monkeypatch: pytest.MonkeyPatch) -> None:
    clean_otel_env(monkeypatch)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _SYSTEM in Path(str(item.path)).parents:
            item.add_marker(pytest.mark.system)
