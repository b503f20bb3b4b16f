"""verifiers (prime-rl's environments): a trajectory per rollout, without editing
verifiers.

    from otel_rollout.integrations.verifiers import VerifiersInstrumentor
    VerifiersInstrumentor().instrument()

Each ``verifiers.v1.rollout.Rollout`` (what ``Agent.run`` and ``Agent.interaction``
drive: ``open`` / ``step`` / ``close``) is a trajectory root. Its phases are timed by
verifiers' own clock, so the breakdown equals verifiers' ``Trace.timing`` per rollout:
boot and setup are ``env_setup``, each model call is a ``generate`` span (``llm``)
ending where its ``ModelCall.time`` ends, the agent span less its model calls is
``env`` (verifiers' ``harness`` time), finalize and scoring are phases of their own
(``other`` unless mapped), and the teardown after scoring (harness cleanup, runtime
stop), which verifiers does not time, is ``env_teardown``. The W3C ``traceparent`` of
each generate span goes upstream with the eval client's request, so a vLLM server's
``llm_request`` span nests under it. A ``vf-eval`` run (its ``gather_rollouts``) is a
batch; inside the user's own ``otel_rollout.batch()`` rollouts join that one.

The modules: ``_state`` (rollouts in flight by trace id), ``_rollout`` (the lifecycle:
root, status, rewards), ``_phases`` (phase spans from verifiers' timestamps),
``_calls`` (model calls and the traceparent) and ``_instrumentor`` (what is patched,
and undoing it).
"""

from __future__ import annotations

from otel_rollout.integrations import require

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
    "BATCH_SOURCE",
    "CLIENTS",
    "EVAL_RUNNER_MODULE",
    "HARNESS",
    "INTERCEPTION_MODULE",
    "PHASE_FINALIZE",
    "PHASE_SCORING",
    "ROLLOUT_MODULE",
    "STAGE",
    "STOP_CONDITION",
    "VerifiersInstrumentor",
]
