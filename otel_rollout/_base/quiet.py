"""An exporter's own per-batch error logs, silenced while an outage is already reported."""

from __future__ import annotations

import logging
import threading
from typing import Any

_quiet = threading.local()
_quieted_loggers: set[str] = set()


class _QuietDuringOutage(logging.Filter):
    """Drops an exporter's own per-batch error logs once the outage has been reported."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not getattr(_quiet, "on", False)


def _quiet_loggers_of(exporter: Any) -> None:
    # The exporter logs from its module (and its base classes' modules) on every failed
    # batch; the filter only acts on this thread, inside an export already known to fail.
    for cls in type(exporter).__mro__:
        name = cls.__module__
        if name.startswith("opentelemetry.exporter") and name not in _quieted_loggers:
            _quieted_loggers.add(name)
            logging.getLogger(name).addFilter(_QuietDuringOutage())
