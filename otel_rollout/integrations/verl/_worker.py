"""Ray workers: instrument verl in each worker process, once verl's agent loop loads."""

from __future__ import annotations

from typing import Any

#: The package whose import (every ``AgentLoopWorker`` actor imports it) instruments verl.
AGENT_LOOP_PACKAGE = "verl.experimental.agent_loop"


def instrument_worker() -> None:
    """A Ray ``worker_process_setup_hook``, to run after the Ray integration's:

        ray.init(runtime_env=otel_ray.runtime_env(
            {"worker_process_setup_hook": "otel_rollout.integrations.verl.instrument_worker"}
        ))

    Instruments verl in the worker when ``verl.experimental.agent_loop`` is imported
    (now, if it already is), so workers that never run verl never import it.
    """
    import wrapt

    wrapt.register_post_import_hook(_instrument, AGENT_LOOP_PACKAGE)


def _instrument(module: Any) -> None:
    from otel_rollout.integrations.verl._instrumentor import VerlInstrumentor

    instrumentor = VerlInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()
