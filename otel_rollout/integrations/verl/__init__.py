"""verl: a trajectory per sample of the agent loop, a batch per step, without editing
verl (docs/verl.md).

    from otel_rollout.integrations.verl import VerlInstrumentor
    VerlInstrumentor().instrument()   # in Ray workers: instrument_worker as setup hook
"""

from __future__ import annotations

from otel_rollout.instrumentation import require

require("wrapt", "verl")
require("opentelemetry.instrumentation.instrumentor", "verl")

from otel_rollout.integrations.verl._calls import ACQUIRE_SPAN  # noqa: E402
from otel_rollout.integrations.verl._instrumentor import (  # noqa: E402
    AGENT_LOOP_MODULE,
    TIMER_MODULES,
    VerlInstrumentor,
    instrument_worker,
)
from otel_rollout.integrations.verl._samples import CARRIER_META, TIMING_PREFIX  # noqa: E402
from otel_rollout.integrations.verl._state import TOOL_CALLS_SPAN, WAIT_CAUSE  # noqa: E402
from otel_rollout.integrations.verl._timers import REWARD_PHASE  # noqa: E402

__all__ = [
    "ACQUIRE_SPAN", "AGENT_LOOP_MODULE", "CARRIER_META", "REWARD_PHASE", "TIMER_MODULES",
    "TIMING_PREFIX", "TOOL_CALLS_SPAN", "VerlInstrumentor", "WAIT_CAUSE", "instrument_worker"
]  # fmt: skip
