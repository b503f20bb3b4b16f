"""verifiers (prime-rl's environments): a trajectory per ``verifiers.v1.rollout.Rollout``,
its phases timed by verifiers' own clock, a batch per ``vf-eval`` run, without editing
verifiers (docs/verifiers.md).

    from otel_rollout.integrations.verifiers import VerifiersInstrumentor
    VerifiersInstrumentor().instrument()
"""

from __future__ import annotations

from otel_rollout.instrumentation import require

require("wrapt", "verifiers")

from otel_rollout.integrations.verifiers._instrumentor import (  # noqa: E402
    BATCH_SOURCE,
    CLIENTS,
    EVAL_RUNNER_MODULE,
    INTERCEPTION_MODULE,
    ROLLOUT_MODULE,
    VerifiersInstrumentor,
)
from otel_rollout.integrations.verifiers._phases import (  # noqa: E402
    HARNESS,
    PHASE_FINALIZE,
    PHASE_SCORING,
    STAGE,
    STOP_CONDITION,
)

__all__ = [
    "BATCH_SOURCE", "CLIENTS", "EVAL_RUNNER_MODULE", "HARNESS", "INTERCEPTION_MODULE",
    "PHASE_FINALIZE", "PHASE_SCORING", "ROLLOUT_MODULE", "STAGE", "STOP_CONDITION",
    "VerifiersInstrumentor"
]  # fmt: skip
