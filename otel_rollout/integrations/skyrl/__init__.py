"""SkyRL: a trajectory per ``SkyRLGymGenerator.agent_loop`` call, without editing SkyRL.

    from otel_rollout.integrations.skyrl import SkyRLInstrumentor
    SkyRLInstrumentor().instrument()

While ``agent_loop`` runs, env calls are timed where SkyRL times them: on the event loop,
around the ``await`` of ``_run_in_executor_if_available(env.init|step|close, ...)``. The
wait for a free thread in SkyRL's env pool is an ``env_queue`` phase (counted in the band
of the call it waits for: ``env`` for a step, so our ``env`` is SkyRL's
``time_splits["env"]``), and the call is an ``env_setup``/``env_step``/``env_teardown``
phase from when a thread starts it until its result is back on the loop. ``skyrl_gym.make``
(as the generator module references it) opens the ``env_setup`` phase, which ends where
the wait for init's thread starts (or covers init too, inline). The env's methods are also
wrapped on the instance, with the trajectory handle captured, for calls made any other way.
``generate`` and ``finish_session`` of the ``inference_engine_client``'s class are wrapped
(on the class, never the instance: SkyRL pickles its clients), and the W3C ``traceparent``
of the ``generate`` span is added to the headers of the HTTP ``_post`` (SkyRL's remote
inference client; from ``skyrl`` 0.4 generate requests go through
``RemoteGenerateClient._post``, wrapped too), so a vLLM server's ``llm_request`` spans
nest under it. ``uninstrument()`` restores every method it wrapped.

The root span encloses the whole call, including the ``finish_session`` in SkyRL's
``finally``, which its ``e2e_time`` leaves out: that call is a ``finish_session`` phase,
outside the trajectory's accounted time, so the breakdown's ``e2e`` (the ``completion``
key) is SkyRL's ``e2e_time``. Phases timed on the loop end on the loop's next turn at the
time taken when the call returned, so the span processors' work is outside SkyRL's timers
as it is outside the spans.

The modules: ``_state`` (the trajectory of the running ``agent_loop`` call, and the
phases whose end waits for the loop's next turn), ``_calls`` (what is read from SkyRL's
arguments and outputs), ``_env`` (``make`` and the env's init/step/close, timed),
``_client`` (the inference client's ``generate``, ``finish_session`` and HTTP
traceparent), ``_patches`` (class methods wrapped with ``wrapt`` and restored) and
``_instrumentor`` (what is patched, and undoing it).
"""

from __future__ import annotations

from otel_rollout.integrations import require

require("wrapt", "skyrl")

from otel_rollout.integrations.skyrl._client import FINISH_SESSION_PHASE  # noqa: E402
from otel_rollout.integrations.skyrl._instrumentor import (  # noqa: E402
    GENERATE_CLIENT_CLASS,
    GENERATOR_CLASS,
    GENERATOR_MODULE,
    REMOTE_CLIENT_MODULE,
    SkyRLInstrumentor,
)

__all__ = [
    "FINISH_SESSION_PHASE",
    "GENERATE_CLIENT_CLASS",
    "GENERATOR_CLASS",
    "GENERATOR_MODULE",
    "REMOTE_CLIENT_MODULE",
    "SkyRLInstrumentor",
]
