"""Phases timed where verl times them: ``simple_timer`` as ``tool_agent_loop``,
``single_turn_agent_loop`` and ``agent_loop`` reference it, replaced in those modules by
one that opens our phase around verl's own timer.

* ``generate_sequences`` (the ``await server_manager.generate(...)`` of each turn): a
  ``generate`` (``llm``) phase, current while the call runs, so the client's spans nest
  under it; ``LLMServerClient.generate`` adds the request and output attributes to it.
* ``tool_calls`` (the ``await asyncio.gather(*tool calls)`` of each round): a
  :class:`~otel_rollout.integrations.verl._state.ToolRound`, an ``env_queue`` wait then
  an ``env`` phase that together cover the timer's block.
* ``compute_score`` (the streaming reward in ``_compute_score``): a ``reward`` phase, in
  ``other`` unless ``bands`` maps it.

Our phase starts just before verl's timer starts (its span is made once the timer runs,
with the time taken before). On the default clock it ends exactly as long after that
start as verl's timer added to ``timing_raw`` (``perf_counter``, like our monotonic
clock), so a thread switch between verl's reading and ours (up to the 5 ms switch
interval in a Ray actor's busy process) moves neither figure: per trajectory our ``llm``
is verl's ``generate_sequences`` and our ``env`` its ``tool_calls``. On any other clock
(an injected one, in tests) it ends at that clock's reading just after verl's timer
stops.
"""

from __future__ import annotations

import contextlib
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from otel_rollout import attributes as A
from otel_rollout.instrumentation import internal_error, now_ns
from otel_rollout.integrations.verl._state import STATE, State, ToolRound

GENERATE, TOOL_CALLS, COMPUTE_SCORE = "generate_sequences", "tool_calls", "compute_score"
#: The phase of verl's ``compute_score`` timer.
REWARD_PHASE = "reward"


class _Timed:
    """verl's timer context manager inside our phase."""

    __slots__ = ("_before", "_inner", "_name", "_open", "_state", "_t0", "_timing", "_token")

    def __init__(self, inner: Any, name: str, state: State, timing: Any) -> None:
        self._inner = inner
        self._name = name
        self._state = state
        self._open: Any = None
        self._token: Any = None
        self._t0 = 0
        # verl's ``timing_raw`` and its figure for this name before the block, when the
        # trajectory's clock is ours (the delta is verl's own measure of the block)
        self._timing = timing if state.traj._clock is now_ns and isinstance(timing, dict) else None
        self._before: Any = None

    def __enter__(self) -> Any:
        # The time first, verl's timer next, our span last: making the span (and the
        # span processors' on_start) falls inside verl's timer and inside our phase.
        t0 = self._t0 = self._state.traj._clock()
        if self._timing is not None:
            self._before = self._timing.get(self._name, 0.0)
        value = self._inner.__enter__()
        try:
            self._begin(t0)
        except Exception as exc:  # telemetry never stops the loop
            internal_error("verl timer start", exc)
        return value

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> Any:
        try:
            return self._inner.__exit__(exc_type, exc, tb)
        finally:
            try:
                self._finish(exc)
            except Exception as err:
                internal_error("verl timer end", err)

    def _begin(self, t0: int) -> None:
        state, traj = self._state, self._state.traj
        if self._name == GENERATE:
            gen = traj.generate(operation=A.OP_TEXT_COMPLETION).start(
                context=otel_context.get_current(), start_time=t0
            )
            state.gen = self._open = gen
            self._token = otel_context.attach(trace.set_span_in_context(gen.span))
        elif self._name == TOOL_CALLS:
            state.round = self._open = ToolRound(traj, t0)
        else:
            phase = traj.phase(REWARD_PHASE).start(
                context=otel_context.get_current(), start_time=t0
            )
            self._open = phase
            self._token = otel_context.attach(trace.set_span_in_context(phase.span))

    def _finish(self, exc: BaseException | None) -> None:
        opened, state = self._open, self._state
        if opened is None:
            return
        end = self._end(state.traj._clock())
        if self._token is not None:
            with contextlib.suppress(Exception):
                otel_context.detach(self._token)
        if isinstance(opened, ToolRound):
            if state.round is opened:
                state.round = None
            opened.close(end, exc)
            return
        if state.gen is opened:
            state.gen = None
        if exc is not None:
            opened.record_error(exc)
        opened.end(end)

    def _end(self, now: int) -> int:
        """The block's end: our start plus what verl's timer measured, where that is
        known and falls between the phase's start and ``now``; ``now`` otherwise."""
        timing, before = self._timing, self._before
        if timing is None or not isinstance(before, (int, float)):
            return now
        after = timing.get(self._name)
        if not isinstance(after, (int, float)):
            return now
        end = self._t0 + round((after - before) * 1e9)
        opened = self._open
        start = opened.t1 if isinstance(opened, ToolRound) else self._t0
        return end if start <= end <= now else now


def timer_wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``simple_timer(name, timing_raw)``: ours around verl's for the three names."""
    inner = wrapped(*args, **kwargs)
    state = STATE.get()
    if state is None:
        return inner
    name = args[0] if args else kwargs.get("name")
    if name not in (GENERATE, TOOL_CALLS, COMPUTE_SCORE):
        return inner
    timing = args[1] if len(args) > 1 else kwargs.get("timing_raw")
    return _Timed(inner, name, state, timing)
