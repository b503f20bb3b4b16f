"""The ``agent_loop`` call running in this context (:class:`State`) and its env's calls
(docs/skyrl.md): ``skyrl_gym.make`` opens ``env_setup``; init, step and close are timed
on the loop around ``_run_in_executor_if_available`` (a pool thread's wait an
``env_queue``), and wrapped on the env for calls made any other way."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import inspect
from dataclasses import dataclass, field
from typing import Any

from opentelemetry import trace

from otel_rollout import PhaseHandle as Phase
from otel_rollout import TrajectoryHandle as Trajectory
from otel_rollout import attributes as A
from otel_rollout.instrumentation import QueuedCall, current_span, internal_error

STATE: contextvars.ContextVar[State | None] = contextvars.ContextVar(
    "otel_rollout_skyrl_state", default=None
)


@dataclass
class State:
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


_MARK = "_otel_rollout_wrapped"  # on an env whose methods are wrapped
_SETUP = "_otel_rollout_setup"  # the env_setup phase, on an env between make() and init()
_ENV_CALL = "_otel_rollout_env_call"  # on a wrapped env method: (kind, state, env, opener)


def _call_in_phase(phase: Phase, fn: Any, *a: Any, **kw: Any) -> Any:
    """Run ``fn`` with the phase's span current on this thread, then end the phase."""
    try:
        with current_span(phase.span):
            return fn(*a, **kw)
    except BaseException as exc:
        phase.record_error(exc)
        raise
    finally:
        phase.end()


def _take_setup(env: Any, state: State) -> Phase | None:
    """The env_setup phase ``make()`` opened for this env, if init has not run yet."""
    setup = env.__dict__.pop(_SETUP, None) if hasattr(env, "__dict__") else None
    if setup is not None:
        with contextlib.suppress(ValueError):
            state.pending_setup.remove(setup)
    return setup


def _record_step_reward(output: Any) -> Any:
    """The ``reward`` of an ``env.step`` output, on the env step span it ran in."""
    try:
        reward = output.get("reward") if isinstance(output, dict) else None
        span = trace.get_current_span()
        phase = (getattr(span, "attributes", None) or {}).get(A.PHASE)
        if reward is not None and phase == A.PHASE_ENV:
            state = STATE.get()  # the trajectory's logger gets the evaluation event
            Phase(span, logger=state.traj.logger if state is not None else None).set_reward(reward)
    except Exception as exc:
        internal_error("skyrl step reward", exc)
    return output


def _timed(env: Any, state: State, kind: str, opener: Any, original: Any) -> Any:
    """``env.<kind>`` in its phase; a sync one marked for ``traced_run`` to time on the
    loop, an ``init`` ending the phase ``make()`` opened."""
    rewarded = kind == "step"
    if inspect.iscoroutinefunction(original):  # an async env: timed on the loop

        @functools.wraps(original)
        async def timed_async(*a: Any, **kw: Any) -> Any:
            with opener():
                output = await original(*a, **kw)
                return _record_step_reward(output) if rewarded else output

        return timed_async

    @functools.wraps(original)
    def run(*a: Any, **kw: Any) -> Any:  # what a thread runs (traced_run's phase current)
        output = original(*a, **kw)
        return _record_step_reward(output) if rewarded else output

    @functools.wraps(original)
    def timed(*a: Any, **kw: Any) -> Any:
        setup = _take_setup(env, state) if kind == "init" else None
        if setup is not None:
            return _call_in_phase(setup, run, *a, **kw)
        with opener():  # a second init, or an env made outside make()
            return run(*a, **kw)

    timed.__wrapped__ = run
    timed.__dict__[_ENV_CALL] = (kind, state, env, opener)
    return timed


def _wrap_env(env: Any, state: State) -> Any:
    """Wrap init/step/close on the instance (spans parent to the root off-context too)."""
    if getattr(env, _MARK, False):
        return env
    traj = state.traj
    for kind, opener in (("init", traj.env_setup), ("step", traj.env_step),
                         ("close", traj.env_teardown)):  # fmt: skip
        original = getattr(env, kind, None)
        if original is not None:
            with contextlib.suppress(Exception):  # a class with __slots__ stays unwrapped
                setattr(env, kind, _timed(env, state, kind, opener, original))
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
    if call is None or call[1] is not state or func is None:  # func: set when call is
        return await wrapped(*args, **kwargs)
    kind, _, env, opener = call
    before = _take_setup(env, state) if kind == "init" else None
    queued = QueuedCall(state.traj, opener, before=before, end=state.end_later)
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
        try:
            with current_span(setup.span):
                env = self._real.make(*args, **kwargs)
        except BaseException as exc:
            setup.record_error(exc)
            setup.end()
            raise
        _wrap_env(env, state)
        if callable(getattr(env, "init", None)) and hasattr(env, "__dict__"):
            env.__dict__[_SETUP] = setup
            state.pending_setup.append(setup)
        else:
            setup.end()
        return env
