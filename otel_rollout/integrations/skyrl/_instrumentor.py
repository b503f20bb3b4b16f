"""``SkyRLInstrumentor``: wraps ``SkyRLGymGenerator.agent_loop`` (a trajectory per call),
its ``_run_in_executor_if_available`` (env calls timed on the loop), the generator
module's ``skyrl_gym`` (``make`` traced) and ``RemoteGenerateClient._post`` (the
traceparent on generate requests); ``uninstrument()`` restores each."""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from otel_rollout.instrumentation import (
    attach_batch,
    detach_batch,
    require,
    rollout_tracer,
    step_span_batch,
)
from otel_rollout.integrations.skyrl._calls import model_of, trajectory_kwargs
from otel_rollout.integrations.skyrl._client import post_wrapper, wrap_client
from otel_rollout.integrations.skyrl._env import GymProxy, traced_run
from otel_rollout.integrations.skyrl._patches import Patches
from otel_rollout.integrations.skyrl._state import STATE, State

GENERATOR_MODULE = "skyrl.train.generators.skyrl_gym_generator"
GENERATOR_CLASS = "SkyRLGymGenerator"
#: Where ``skyrl`` >= 0.4 sends generate requests from: ``RemoteGenerateClient._post``.
REMOTE_CLIENT_MODULE = "skyrl.backends.skyrl_train.inference_servers.remote_inference_client"
GENERATE_CLIENT_CLASS = "RemoteGenerateClient"


class SkyRLInstrumentor(BaseInstrumentor):
    """Instrument ``SkyRLGymGenerator.agent_loop``; ``instrument()`` is idempotent."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        module = require(GENERATOR_MODULE, "skyrl")
        cls = getattr(module, GENERATOR_CLASS)
        tracer = rollout_tracer(kwargs)
        self._rollout_tracer = tracer
        self._module = module
        self._real_gym = module.__dict__.get("skyrl_gym")
        if self._real_gym is not None and not isinstance(self._real_gym, GymProxy):
            module.skyrl_gym = GymProxy(self._real_gym)
        try:
            sig: inspect.Signature | None = inspect.signature(cls.agent_loop)
        except (TypeError, ValueError):
            sig = None

        patches = self._patches = Patches()

        async def agent_loop(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
            if STATE.get() is not None:
                return await wrapped(*args, **kw)
            wrap_client(patches, getattr(instance, "inference_engine_client", None))
            tkw = trajectory_kwargs(args, kw, sig)
            # under the user's step span: a root linked to it, not one giant trace per step
            step = step_span_batch()
            batch_token = attach_batch(step) if step is not None else None
            try:
                async with tracer.trajectory(model=model_of(instance), **tkw) as traj:
                    state = State(traj)
                    token = STATE.set(state)
                    try:
                        return await wrapped(*args, **kw)
                    finally:
                        STATE.reset(token)
                        state.end_pending()
            finally:
                if batch_token is not None:
                    detach_batch(batch_token)

        patches.wrap(cls, "agent_loop", agent_loop)
        patches.wrap(cls, "_run_in_executor_if_available", traced_run)
        try:
            remote = importlib.import_module(REMOTE_CLIENT_MODULE)
        except Exception:  # no remote client here (or its deps, aiohttp/orjson, missing)
            remote = None
        # skyrl >= 0.4 posts generate requests from RemoteGenerateClient, made lazily.
        gen_cls = getattr(remote, GENERATE_CLIENT_CLASS, None)
        wrapper = post_wrapper(gen_cls) if isinstance(gen_cls, type) else None
        if wrapper is not None:
            patches.wrap(gen_cls, "_post", wrapper)

    def _uninstrument(self, **kwargs: Any) -> None:
        self._patches.restore()
        gym = self._module.__dict__.get("skyrl_gym")
        if isinstance(gym, GymProxy):
            self._module.skyrl_gym = gym._real
