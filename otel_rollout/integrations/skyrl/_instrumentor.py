"""``SkyRLInstrumentor``: what is patched in SkyRL, and undoing it."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from otel_rollout.instrumentation import (
    Patches,
    attach_batch,
    detach_batch,
    rollout_tracer,
    step_span_batch,
    warn_once,
)
from otel_rollout.integrations.skyrl._client import (
    model_of,
    post_wrapper,
    trajectory_kwargs,
    wrap_client,
)
from otel_rollout.integrations.skyrl._env import STATE, GymProxy, State, traced_run
from otel_rollout.integrations.skyrl._steps import patch_steps

#: The distribution instrumented and the versions supported (contrib's dependency check).
_instruments = ("skyrl >= 0.4",)

GENERATOR_MODULE = "skyrl.train.generators.skyrl_gym_generator"
GENERATOR_CLASS = "SkyRLGymGenerator"
#: Where ``skyrl`` >= 0.4 sends generate requests from: ``RemoteGenerateClient._post``.
REMOTE_CLIENT_MODULE = "skyrl.backends.skyrl_train.inference_servers.remote_inference_client"
GENERATE_CLIENT_CLASS = "RemoteGenerateClient"


def _install_line() -> str:
    """What to install: ``skyrl`` itself (the extra adds only what the integration needs),
    and the Python it needs."""
    v = sys.version_info
    here = "" if v >= (3, 12) else f"; this is Python {v.major}.{v.minor}"
    return f"pip install skyrl 'otel-rollout[skyrl]' (skyrl needs Python 3.12 or later{here})"


def _skyrl_missing() -> bool:
    try:
        return importlib.util.find_spec("skyrl") is None
    except (ImportError, ValueError):
        return False


class SkyRLInstrumentor(BaseInstrumentor):
    """Instrument ``SkyRLGymGenerator.agent_loop`` and, unless ``instrument(steps=False)``,
    the trainers' steps (SkyRL's ``Timer``); ``instrument()`` is idempotent."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def instrument(self, **kwargs: Any) -> Any:
        """As ``BaseInstrumentor.instrument``; without ``skyrl`` one more line says what to
        install."""
        if not kwargs.get("skip_dep_check") and _skyrl_missing():
            warn_once("skyrl-missing", "otel-rollout: SkyRLInstrumentor needs SkyRL: %s",
                      _install_line())  # fmt: skip
        return super().instrument(**kwargs)

    def _instrument(self, **kwargs: Any) -> None:
        try:
            module: Any = importlib.import_module(GENERATOR_MODULE)
        except ImportError as err:
            raise ImportError(
                f"SkyRLInstrumentor instruments SkyRL, which does not import here ({err}): "
                f"{_install_line()}"
            ) from err
        cls = getattr(module, GENERATOR_CLASS)
        tracer = self._rollout_tracer = rollout_tracer(kwargs)
        self._module = module
        gym = module.__dict__.get("skyrl_gym")
        if gym is not None and not isinstance(gym, GymProxy):
            module.skyrl_gym = GymProxy(gym)
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
        try:  # skyrl >= 0.4 posts generate requests from it, made lazily
            remote = importlib.import_module(REMOTE_CLIENT_MODULE)
        except Exception:  # no remote client here (or its deps, aiohttp/orjson, missing)
            remote = None
        gen_cls = getattr(remote, GENERATE_CLIENT_CLASS, None)
        if isinstance(gen_cls, type) and (wrapper := post_wrapper(gen_cls)) is not None:
            patches.wrap(gen_cls, "_post", wrapper)
        self.steps_missing = patch_steps(patches, tracer) if kwargs.get("steps", True) else []

    def _uninstrument(self, **kwargs: Any) -> None:
        self._patches.restore()
        gym = self._module.__dict__.get("skyrl_gym")
        if isinstance(gym, GymProxy):
            self._module.skyrl_gym = gym._real
