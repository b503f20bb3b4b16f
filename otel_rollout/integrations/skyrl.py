"""SkyRL: a trajectory per ``SkyRLGymGenerator.agent_loop`` call, without editing SkyRL.

    from otel_rollout.integrations.skyrl import SkyRLInstrumentor
    SkyRLInstrumentor().instrument()

While ``agent_loop`` runs, ``skyrl_gym.make`` (as the generator module references it) is
intercepted; the env it returns has ``init``/``step``/``close`` wrapped on the instance with
the trajectory handle captured, so spans parent to the trajectory even in executor threads
that did not copy contextvars. ``inference_engine_client.generate`` is wrapped once per
client; the ``generate`` span's traceparent is injected into its HTTP ``_post`` headers.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
from collections.abc import Collection
from typing import Any

from opentelemetry import propagate

from otel_rollout._tracer import RolloutTracer, Trajectory
from otel_rollout.integrations import require

require("wrapt", "skyrl")
import wrapt  # noqa: E402
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # noqa: E402

GENERATOR_MODULE = "skyrl.train.generators.skyrl_gym_generator"
GENERATOR_CLASS = "SkyRLGymGenerator"

_TRAJ: contextvars.ContextVar[Trajectory | None] = contextvars.ContextVar(
    "otel_rollout_skyrl_trajectory", default=None
)
_MARK = "_otel_rollout_wrapped"


def _trajectory_kwargs(args: tuple, kwargs: dict, sig: inspect.Signature | None) -> dict:
    bound: dict[str, Any] = dict(kwargs)
    if sig is not None:
        try:
            bound = dict(sig.bind_partial(None, *args, **kwargs).arguments)
        except TypeError:
            pass
    out: dict[str, Any] = {}
    env_class = bound.get("env_class")
    if env_class is not None:
        out["env"] = str(env_class)
    tid = bound.get("trajectory_id")
    if tid is not None:
        inst = getattr(tid, "instance_id", None)
        rep = getattr(tid, "repetition_id", None)
        if inst is not None:
            out["instance_id"] = inst
            if rep is not None:
                out["repetition_id"] = int(rep)
        else:
            out["trajectory_id"] = str(tid)
    return out


def _model_of(generator: Any) -> str | None:
    for name in ("policy_model_name", "model_name"):
        value = getattr(generator, name, None)
        if isinstance(value, str):
            return value
    cfg = getattr(generator, "generator_cfg", None)
    for name in ("model_name", "policy_model_name"):
        value = getattr(cfg, name, None) if cfg is not None else None
        if isinstance(value, str):
            return value
    return None


def _record_engine_output(gen: Any, output: Any) -> None:
    try:
        if not isinstance(output, dict):
            return
        ids = output.get("response_ids")
        out_tokens = None
        if ids:
            first = ids[0]
            out_tokens = len(first) if isinstance(first, list | tuple) else len(ids)
        reasons = output.get("stop_reasons")
        gen.record(
            output_tokens=out_tokens,
            finish_reasons=[str(r) for r in reasons] if reasons else None,
        )
    except Exception:
        pass


def _input_tokens(args: tuple, kwargs: dict) -> int | None:
    engine_input = args[0] if args else kwargs.get("input_batch", kwargs.get("engine_input"))
    if isinstance(engine_input, dict):
        ids = engine_input.get("prompt_token_ids")
        if ids:
            first = ids[0]
            return len(first) if isinstance(first, list | tuple) else len(ids)
    return None


def _wrap_env(env: Any, traj: Trajectory) -> Any:
    """Wrap init/step/close on the instance; the handle parents to root off-context."""
    if getattr(env, _MARK, False):
        return env
    for attr, opener in (
        ("init", traj.env_setup),
        ("step", traj.env_step),
        ("close", traj.env_teardown),
    ):
        original = getattr(env, attr, None)
        if original is None:
            continue

        def make(original: Any = original, opener: Any = opener) -> Any:
            @functools.wraps(original)
            def wrapper(*a: Any, **kw: Any) -> Any:
                with opener():
                    return original(*a, **kw)

            return wrapper

        try:
            setattr(env, attr, make())
        except Exception:
            pass
    try:
        setattr(env, _MARK, True)
    except Exception:
        pass
    return env


class _GymProxy:
    """Stands in for ``skyrl_gym`` in the generator module: ``make`` is traced."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def make(self, *args: Any, **kwargs: Any) -> Any:
        traj = _TRAJ.get()
        if traj is None:
            return self._real.make(*args, **kwargs)
        # env_setup covers make + init: open it here, close it after init returns.
        scope = traj.env_setup()
        scope.__enter__()
        try:
            env = self._real.make(*args, **kwargs)
        except BaseException as exc:
            scope.__exit__(type(exc), exc, exc.__traceback__)
            raise
        scope.__exit__(None, None, None)
        return _wrap_env(env, traj)


def _inject_post(client: Any) -> None:
    """Inject the current span's traceparent into a remote client's ``_post`` headers."""
    engines = getattr(client, "engines", None) or [client]
    for engine in engines:
        post = getattr(engine, "_post", None)
        if post is None or getattr(post, _MARK, False):
            continue

        @functools.wraps(post)
        async def traced_post(*a: Any, _post: Any = post, **kw: Any) -> Any:
            if _TRAJ.get() is not None:
                headers = dict(kw.get("headers") or {})
                propagate.inject(headers)
                kw["headers"] = headers
            return await _post(*a, **kw)

        traced_post._otel_rollout_wrapped = True  # type: ignore[attr-defined]
        try:
            engine._post = traced_post
        except Exception:
            pass


def _wrap_client(client: Any) -> None:
    if client is None or getattr(client, _MARK, False):
        return
    original = client.generate

    @functools.wraps(original)
    async def generate(*args: Any, **kwargs: Any) -> Any:
        traj = _TRAJ.get()
        if traj is None:
            return await original(*args, **kwargs)
        with traj.generate(input_tokens=_input_tokens(args, kwargs)) as gen:
            output = await original(*args, **kwargs)
            _record_engine_output(gen, output)
            return output

    try:
        client.generate = generate
        _inject_post(client)
        setattr(client, _MARK, True)
    except Exception:
        pass


class SkyRLInstrumentor(BaseInstrumentor):
    """Instrument ``SkyRLGymGenerator.agent_loop``; ``instrument()`` is idempotent."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        module = require(GENERATOR_MODULE, "skyrl")
        cls = getattr(module, GENERATOR_CLASS)
        tracer = kwargs.get("rollout_tracer") or RolloutTracer(
            kwargs.get("tracer_provider"), kwargs.get("meter_provider")
        )
        self._rollout_tracer = tracer
        self._module = module
        self._real_gym = module.__dict__.get("skyrl_gym")
        if self._real_gym is not None and not isinstance(self._real_gym, _GymProxy):
            module.skyrl_gym = _GymProxy(self._real_gym)
        try:
            sig: inspect.Signature | None = inspect.signature(cls.agent_loop)
        except (TypeError, ValueError):
            sig = None

        async def agent_loop(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
            if _TRAJ.get() is not None:
                return await wrapped(*args, **kw)
            _wrap_client(getattr(instance, "inference_engine_client", None))
            tkw = _trajectory_kwargs(args, kw, sig)
            async with tracer.trajectory(model=_model_of(instance), **tkw) as traj:
                token = _TRAJ.set(traj)
                try:
                    return await wrapped(*args, **kw)
                finally:
                    _TRAJ.reset(token)

        wrapt.wrap_function_wrapper(module, f"{GENERATOR_CLASS}.agent_loop", agent_loop)

    def _uninstrument(self, **kwargs: Any) -> None:
        module = self._module
        cls = getattr(module, GENERATOR_CLASS)
        fn = cls.__dict__.get("agent_loop")
        if hasattr(fn, "__wrapped__"):
            cls.agent_loop = fn.__wrapped__
        gym = module.__dict__.get("skyrl_gym")
        if isinstance(gym, _GymProxy):
            module.skyrl_gym = gym._real
