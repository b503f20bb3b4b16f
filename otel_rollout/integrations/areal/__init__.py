"""AReaL: a trajectory per episode of the asynchronous rollout path, a batch per
``rollout_batch`` / ``prepare_batch``, without editing AReaL (docs/areal.md).

    from otel_rollout.integrations.areal import AReaLInstrumentor
    AReaLInstrumentor().instrument()
"""

from __future__ import annotations

from otel_rollout.instrumentation import require

require("wrapt", "areal")
require("opentelemetry.instrumentation.instrumentor", "areal")

from otel_rollout.integrations.areal._client import HTTP_CALLS, REQUEST_ID, REWARD_PHASE  # noqa: E402
from otel_rollout.integrations.areal._instrumentor import PHASE_MODULES, AReaLInstrumentor  # noqa: E402
from otel_rollout.integrations.areal._state import (  # noqa: E402
    EVAL,
    REASON,
    SESSION_ID,
    STATUS,
    TASK_ID,
    VERSION_MAX,
    WORKFLOW,
)
from otel_rollout.integrations.areal._tasks import CALL, CONCURRENCY  # noqa: E402

__all__ = [
    "CALL", "CONCURRENCY", "EVAL", "HTTP_CALLS", "PHASE_MODULES", "REASON", "REQUEST_ID",
    "REWARD_PHASE", "SESSION_ID", "STATUS", "TASK_ID", "VERSION_MAX", "WORKFLOW",
    "AReaLInstrumentor"
]  # fmt: skip
