"""SkyRL: a trajectory per ``SkyRLGymGenerator.agent_loop`` call, and the trainers' steps
from SkyRL's own timers, without editing SkyRL (docs/skyrl.md).

    from otel_rollout.integrations.skyrl import SkyRLInstrumentor
    SkyRLInstrumentor().instrument()
"""

from __future__ import annotations

from otel_rollout.instrumentation import require

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
    "FINISH_SESSION_PHASE", "GENERATE_CLIENT_CLASS", "GENERATOR_CLASS", "GENERATOR_MODULE",
    "REMOTE_CLIENT_MODULE", "SkyRLInstrumentor"
]  # fmt: skip
