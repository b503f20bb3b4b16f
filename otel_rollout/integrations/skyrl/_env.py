"""The env's calls, timed: ``skyrl_gym.make`` opens the ``env_setup`` phase; init, step
and close are timed on the event loop around SkyRL's ``_run_in_executor_if_available``
(the wait for a pool thread an ``env_queue`` phase), and wrapped on the env instance for
calls made any other way. A step's reward is recorded on its span."""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from otel_rollout import PhaseHandle as Phase
from otel_rollout import attributes as A
from otel_rollout.instrumentation import QueuedCall, internal_error
from otel_rollout.integrations.skyrl._state import STATE, State

_MARK = "_otel_rollout_wrapped"  # on an env whose methods are wrapped
_SETUP = "_otel_rollout_setup"  # the env_setup phase, on an env between make() and init()
_ENV_CALL = "_otel_rollout_env_call"  # on a wrapped env method: (kind, state, env)
_INIT, _STEP, _CLOSE = "init", "step", "close"


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


def _take_setup(env: Any, state: State) -> Phase | None:
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


def _wrap_env(env: Any, state: State) -> Any:
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


async def traced_run(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``_run_in_executor_if_available(env.init|step|close, ...)``, timed on the event loop
    as SkyRL times it: the wait for a thread is an ``env_queue`` phase, the call itself
    a phase from when a thread starts it until its result is back on the loop."""
    state = STATE.get()
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


class GymProxy:
    """Stands in for ``skyrl_gym`` in the generator module: ``make`` is traced."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def make(self, *args: Any, **kwargs: Any) -> Any:
        state = STATE.get()
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
