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
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import importlib
import inspect
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from otel_rollout import _attributes as A
from otel_rollout._batch_span import attach_batch, detach_batch, step_span_batch
from otel_rollout._context import QueuedCall
from otel_rollout._errors import internal_error
from otel_rollout._tracer import Phase, RolloutTracer, Trajectory
from otel_rollout.integrations import require

require("wrapt", "skyrl")
import wrapt  # noqa: E402
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor  # noqa: E402

GENERATOR_MODULE = "skyrl.train.generators.skyrl_gym_generator"
GENERATOR_CLASS = "SkyRLGymGenerator"
#: Where ``skyrl`` >= 0.4 sends generate requests from: ``RemoteGenerateClient._post``.
REMOTE_CLIENT_MODULE = "skyrl.backends.skyrl_train.inference_servers.remote_inference_client"
GENERATE_CLIENT_CLASS = "RemoteGenerateClient"
#: The phase of ``inference_engine_client.finish_session``: outside the accounted time
#: (SkyRL's ``e2e_time`` leaves it out) unless ``bands`` maps it to a band.
FINISH_SESSION_PHASE = A.PHASE_FINISH_SESSION

_STATE: contextvars.ContextVar[_State | None] = contextvars.ContextVar(
    "otel_rollout_skyrl_state", default=None
)
_MARK = "_otel_rollout_wrapped"  # on an env whose methods are wrapped
_IN_GENERATE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "otel_rollout_skyrl_in_generate", default=False
)
_SETUP = "_otel_rollout_setup"  # the env_setup phase, on an env between make() and init()
_ENV_CALL = "_otel_rollout_env_call"  # on a wrapped env method: (kind, state, env)
_INIT, _STEP, _CLOSE = "init", "step", "close"
_W3C = TraceContextTextMapPropagator()  # what vLLM's server reads, whatever else is set


def _trajectory_kwargs(args: tuple, kwargs: dict, sig: inspect.Signature | None) -> dict:
    bound: dict[str, Any] = dict(kwargs)
    if sig is not None:
        with contextlib.suppress(TypeError):
            bound = dict(sig.bind_partial(None, *args, **kwargs).arguments)
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
    except Exception as exc:  # SkyRL's output shape changed: report once, trace on
        internal_error("skyrl generate output", exc)


def _input_tokens(args: tuple, kwargs: dict) -> int | None:
    engine_input = args[0] if args else kwargs.get("input_batch", kwargs.get("engine_input"))
    if isinstance(engine_input, dict):
        ids = engine_input.get("prompt_token_ids")
        if ids:
            first = ids[0]
            return len(first) if isinstance(first, list | tuple) else len(ids)
    return None


#: SkyRL's sampling-parameter keys (backend dicts) and the ``generate()`` keywords for them.
_SAMPLING_KEYS = (
    ("max_tokens", "max_tokens"), ("max_generate_length", "max_tokens"),
    ("max_new_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p"),
    ("top_k", "top_k"), ("seed", "seed"), ("n", "n"),
)  # fmt: skip


def _request(args: tuple, kwargs: dict) -> dict[str, Any]:
    """GenAI request keywords of a generate call: token-in/token-out is a
    ``text_completion``; the sampling parameters SkyRL passes."""
    engine_input = args[0] if args else kwargs.get("input_batch", kwargs.get("engine_input"))
    out: dict[str, Any] = {"input_tokens": _input_tokens(args, kwargs)}
    if not isinstance(engine_input, dict):
        return out
    if engine_input.get("prompt_token_ids"):
        out["operation"] = A.OP_TEXT_COMPLETION
    params = engine_input.get("sampling_params")
    if isinstance(params, dict):
        for key, name in _SAMPLING_KEYS:
            value = params.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out.setdefault(name, value)
    return out


@dataclass
class _State:
    """The trajectory of one ``agent_loop`` call, its env_setup spans not yet ended, and
    the phases timed but whose ``end()`` waits for the loop's next turn."""

    traj: Trajectory
    pending_setup: list[Phase] = field(default_factory=list)
    deferred: list[tuple[Phase, int]] = field(default_factory=list)

    def end_later(self, phase: Phase, end_ns: int) -> None:
        """End ``phase`` at ``end_ns``, on the loop's next turn: the span processors' work
        then falls outside SkyRL's timer around the call, as it falls outside the span."""
        self.deferred.append((phase, end_ns))
        if len(self.deferred) == 1:
            try:
                asyncio.get_running_loop().call_soon(self.end_deferred)
            except RuntimeError:  # no running loop: now
                self.end_deferred()

    def end_deferred(self) -> None:
        items, self.deferred = self.deferred, []
        for phase, end_ns in items:
            with contextlib.suppress(Exception):
                phase.end(end_ns)

    def end_pending(self) -> None:
        self.end_deferred()
        for setup in self.pending_setup:  # make() returned but init() never ran
            with contextlib.suppress(Exception):
                setup.end()
        self.pending_setup.clear()


def _call_in_phase(phase: Phase, fn: Any, *a: Any, **kw: Any) -> Any:
    """Run ``fn`` with the phase's span current on this thread, then end the phase."""
    token = otel_context.attach(trace.set_span_in_context(phase.span))
    try:
        return fn(*a, **kw)
    except BaseException as exc:
        phase.record_error(exc)
        raise
    finally:
        with contextlib.suppress(Exception):
            otel_context.detach(token)
        phase.end()


def _take_setup(env: Any, state: _State) -> Phase | None:
    """The env_setup phase opened by ``make()`` for this env, if init has not run yet."""
    setup = env.__dict__.pop(_SETUP, None) if hasattr(env, "__dict__") else None
    if setup is not None:
        with contextlib.suppress(ValueError):
            state.pending_setup.remove(setup)
    return setup


def _record_step_reward(output: Any) -> None:
    """The ``reward`` of an ``env.step`` output, on the env step span it ran in."""
    try:
        reward = output.get("reward") if isinstance(output, dict) else None
        span = trace.get_current_span()
        attrs = getattr(span, "attributes", None) or {}
        if reward is not None and attrs.get(A.PHASE) == A.PHASE_ENV:
            Phase(span).set_reward(reward)
    except Exception as exc:
        internal_error("skyrl step reward", exc)


def _step_rewarded(step: Any) -> Any:
    """``env.step`` recording the reward it returns (per-step rewards on the step spans)."""
    if inspect.iscoroutinefunction(step):

        @functools.wraps(step)
        async def async_step(*a: Any, **kw: Any) -> Any:
            output = await step(*a, **kw)
            _record_step_reward(output)
            return output

        return async_step

    @functools.wraps(step)
    def sync_step(*a: Any, **kw: Any) -> Any:
        output = step(*a, **kw)
        _record_step_reward(output)
        return output

    return sync_step


def _wrap_env(env: Any, state: _State) -> Any:
    """Wrap init/step/close on the instance, for calls that do not go through
    ``_run_in_executor_if_available`` (timed there, on the loop); spans parent to the
    root off-context too."""
    if getattr(env, _MARK, False):
        return env
    traj = state.traj

    def init(original: Any) -> Any:
        @functools.wraps(original)
        def wrapper(*a: Any, **kw: Any) -> Any:
            setup = _take_setup(env, state)
            if setup is None:  # a second init, or an env made outside make()
                with traj.env_setup():
                    return original(*a, **kw)
            return _call_in_phase(setup, original, *a, **kw)

        return wrapper

    def scoped(opener: Any) -> Any:
        def make(original: Any) -> Any:
            @functools.wraps(original)
            def wrapper(*a: Any, **kw: Any) -> Any:
                with opener():
                    return original(*a, **kw)

            return wrapper

        return make

    def timed_async(opener: Any, original: Any) -> Any:
        @functools.wraps(original)
        async def wrapper(*a: Any, **kw: Any) -> Any:
            with opener():
                return await original(*a, **kw)

        return wrapper

    for attr, kind, make, opener in (
        ("init", _INIT, init, traj.env_setup),
        ("step", _STEP, scoped(traj.env_step), traj.env_step),
        ("close", _CLOSE, scoped(traj.env_teardown), traj.env_teardown),
    ):
        original = getattr(env, attr, None)
        if original is None:
            continue
        if kind == _STEP:
            original = _step_rewarded(original)
        if inspect.iscoroutinefunction(original):  # an async env: timed on the loop
            wrapped = timed_async(opener, original)
        else:
            wrapped = make(original)
            # what _run_in_executor_if_available needs to time this call on the loop
            wrapped.__dict__[_ENV_CALL] = (kind, state, env)
        with contextlib.suppress(Exception):  # a class with __slots__ stays unwrapped
            setattr(env, attr, wrapped)
    with contextlib.suppress(Exception):
        setattr(env, _MARK, True)
    return env


async def _traced_run(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``_run_in_executor_if_available(env.init|step|close, ...)``, timed on the event loop
    as SkyRL times it: the wait for a thread is an ``env_queue`` phase, the call itself
    a phase from when a thread starts it until its result is back on the loop."""
    state = _STATE.get()
    func = args[0] if args else None
    call = getattr(func, _ENV_CALL, None) if state is not None else None
    if call is None or call[1] is not state:
        return await wrapped(*args, **kwargs)
    kind, _, env = call
    traj = state.traj
    before = None
    if kind == _INIT:
        before = _take_setup(env, state)
        opener = traj.env_setup
    else:
        opener = traj.env_step if kind == _STEP else traj.env_teardown
    queued = QueuedCall(traj, opener, before=before, end=state.end_later)
    # the call runs in a copy of this context: the trajectory is current in the thread too
    bound = functools.partial(contextvars.copy_context().run, queued.run, func.__wrapped__)
    try:
        result = await wrapped(bound, *args[1:], **kwargs)
    except BaseException as exc:
        queued.finish(exc)
        raise
    queued.finish()
    return result


class _GymProxy:
    """Stands in for ``skyrl_gym`` in the generator module: ``make`` is traced."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def make(self, *args: Any, **kwargs: Any) -> Any:
        state = _STATE.get()
        if state is None:
            return self._real.make(*args, **kwargs)
        # One env_setup span covers make() and the init() that follows; it is ended by the
        # init wrapper, in whatever thread init runs, or when agent_loop returns.
        setup = state.traj.env_setup().start()
        token = otel_context.attach(trace.set_span_in_context(setup.span))
        try:
            env = self._real.make(*args, **kwargs)
        except BaseException as exc:
            setup.record_error(exc)
            setup.end()
            raise
        finally:
            otel_context.detach(token)
        _wrap_env(env, state)
        if callable(getattr(env, "init", None)) and hasattr(env, "__dict__"):
            env.__dict__[_SETUP] = setup
            state.pending_setup.append(setup)
        else:
            setup.end()
        return env


def _add_traceparent(sig: inspect.Signature, a: tuple, kw: dict) -> tuple[tuple, dict]:
    """The call's arguments with the current span's traceparent in ``headers``."""
    if _STATE.get() is None:
        return a, kw
    try:
        bound = sig.bind_partial(*a, **kw)
        headers = dict(bound.arguments.get("headers") or {})
        _W3C.inject(headers)
        bound.arguments["headers"] = headers
        return bound.args, bound.kwargs
    except Exception as exc:
        internal_error("skyrl traceparent", exc)
        return a, kw


_ABSENT = object()


class _Patches:
    """Methods wrapped on their classes (never on instances: SkyRL pickles its clients),
    each restored exactly by :meth:`restore`."""

    def __init__(self) -> None:
        self._done: dict[tuple[type, str], Any] = {}

    def wrap(self, cls: type, name: str, wrapper: Any) -> bool:
        key = (cls, name)
        if key in self._done or not callable(getattr(cls, name, None)):
            return False
        self._done[key] = cls.__dict__.get(name, _ABSENT)
        wrapt.wrap_function_wrapper(cls, name, wrapper)
        return True

    def restore(self) -> None:
        for (cls, name), original in self._done.items():
            with contextlib.suppress(Exception):
                if original is _ABSENT:  # inherited: drop the wrapper from the subclass
                    delattr(cls, name)
                else:
                    setattr(cls, name, original)
        self._done.clear()


def _post_wrapper(cls: type) -> Any:
    """A wrapt wrapper adding the traceparent to ``cls._post(url, json, headers=None)``."""
    try:
        sig = inspect.signature(cls._post)  # type: ignore[attr-defined]
    except (AttributeError, TypeError, ValueError):
        return None
    if "headers" not in sig.parameters:
        return None
    sig = sig.replace(parameters=list(sig.parameters.values())[1:])  # self comes apart

    def traced_post(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        args, kwargs = _add_traceparent(sig, args, kwargs)
        return wrapped(*args, **kwargs)

    return traced_post


async def _traced_generate(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    state = _STATE.get()
    if state is None or _IN_GENERATE.get():
        return await wrapped(*args, **kwargs)
    traj = state.traj
    # Timed as SkyRL's llm timer: from before our own work until the engine's answer is
    # back, the span's processing after that (see _State.end_later).
    start = traj._clock()
    token = _IN_GENERATE.set(True)
    try:
        gen = traj.generate(**_request(args, kwargs)).start(start_time=start)
        current = otel_context.attach(trace.set_span_in_context(gen.span))
        try:
            output = await wrapped(*args, **kwargs)
        except BaseException as exc:
            end = traj._clock()
            gen.record_error(exc)
            state.end_later(gen, end)
            raise
        finally:
            otel_context.detach(current)
        _record_engine_output(gen, output)
        state.end_later(gen, traj._clock())
        return output
    finally:
        _IN_GENERATE.reset(token)


async def _traced_finish_session(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    state = _STATE.get()
    if state is None:
        return await wrapped(*args, **kwargs)
    # After SkyRL's e2e_time is taken: a phase of its own, so it is visible.
    with state.traj.phase(FINISH_SESSION_PHASE):
        return await wrapped(*args, **kwargs)


def _wrap_client(patches: _Patches, client: Any) -> None:
    """Trace ``generate`` and ``finish_session`` of the client's class, and add the
    traceparent to the HTTP ``_post`` of its class or of its engines' classes."""
    if client is None:
        return
    try:
        cls = type(client)
        patches.wrap(cls, "generate", _traced_generate)
        patches.wrap(cls, "finish_session", _traced_finish_session)
        for engine in getattr(client, "engines", None) or [client]:
            wrapper = _post_wrapper(type(engine))
            if wrapper is not None:
                patches.wrap(type(engine), "_post", wrapper)
    except Exception as exc:
        internal_error("skyrl client wrap", exc)


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

        patches = self._patches = _Patches()

        async def agent_loop(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
            if _STATE.get() is not None:
                return await wrapped(*args, **kw)
            _wrap_client(patches, getattr(instance, "inference_engine_client", None))
            tkw = _trajectory_kwargs(args, kw, sig)
            # under the user's step span: a root linked to it, not one giant trace per step
            step = step_span_batch()
            batch_token = attach_batch(step) if step is not None else None
            try:
                async with tracer.trajectory(model=_model_of(instance), **tkw) as traj:
                    state = _State(traj)
                    token = _STATE.set(state)
                    try:
                        return await wrapped(*args, **kw)
                    finally:
                        _STATE.reset(token)
                        state.end_pending()
            finally:
                if batch_token is not None:
                    detach_batch(batch_token)

        patches.wrap(cls, "agent_loop", agent_loop)
        patches.wrap(cls, "_run_in_executor_if_available", _traced_run)
        try:
            remote = importlib.import_module(REMOTE_CLIENT_MODULE)
        except Exception:  # no remote client here (or its deps, aiohttp/orjson, missing)
            remote = None
        # skyrl >= 0.4 posts generate requests from RemoteGenerateClient, made lazily.
        gen_cls = getattr(remote, GENERATE_CLIENT_CLASS, None)
        wrapper = _post_wrapper(gen_cls) if isinstance(gen_cls, type) else None
        if wrapper is not None:
            patches.wrap(gen_cls, "_post", wrapper)

    def _uninstrument(self, **kwargs: Any) -> None:
        self._patches.restore()
        gym = self._module.__dict__.get("skyrl_gym")
        if isinstance(gym, _GymProxy):
            self._module.skyrl_gym = gym._real
