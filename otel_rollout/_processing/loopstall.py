"""Event-loop stalls and who caused them (opt-in, docs/waits.md): each callback the asyncio
loop runs is timed and charged to the trajectory whose context it ran in.

Per trajectory: ``loop_own`` (its own callbacks' time on the loop) and ``loop_blocked``
(slow callbacks of others during its lifetime, an upper bound on the delay they caused
it). Each slow callback is also a ``rollout.loop.stall`` event on the culprit's phase and
a ``rollout.loop.stall.duration`` record. How: ``asyncio.events.Handle._run``, where the
default loop runs every callback, is wrapped once per process; uvloop cannot be timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from opentelemetry import metrics, trace

from otel_rollout import attributes as A
from otel_rollout._base.clock import now_ns
from otel_rollout._base.errors import internal_error, warn_once
from otel_rollout._version import __version__

logger = logging.getLogger("otel_rollout")

#: Default threshold of a slow callback: well under an engine round trip, well above a
#: task step of the agent loop itself (tens of microseconds).
DEFAULT_THRESHOLD_S = 0.005


class _Config:
    enabled = False  # opt-in: the event loop is the user's
    threshold_ns = int(DEFAULT_THRESHOLD_S * 1e9)
    clock: Callable[[], int] = time.perf_counter_ns
    meter_provider: metrics.MeterProvider | None = None
    histogram: metrics.Histogram | None = None


_CFG = _Config()


try:  # the settings' variables, for use without configure()
    from otel_rollout._settings.table import from_environment

    _CFG.enabled = bool(from_environment("loop_stalls"))
    _CFG.threshold_ns = int(float(from_environment("loop_stall_threshold_ms")) * 1e6)
except Exception as err:  # never break an import over a setting
    internal_error("loop stall settings", err)


def configure_loop_stalls(enabled: bool | None = None, *, threshold_s: float | None = None,
                          meter_provider: metrics.MeterProvider | None = None,
                          clock: Callable[[], int] | None = None) -> None:  # fmt: skip
    """Turn loop-stall attribution on or off, set its threshold (seconds) and meter provider
    (defaults: off, 5 ms, the global one), for trajectories that start afterwards.
    ``clock`` (integer nanoseconds, monotonic) is for tests."""
    if threshold_s is not None:
        if not isinstance(threshold_s, int | float) or threshold_s < 0:
            raise ValueError(f"threshold_s must be non-negative seconds, got {threshold_s!r}")
        _CFG.threshold_ns = int(threshold_s * 1e9)
    if enabled is not None:
        _CFG.enabled = bool(enabled)
        prepare()  # timed from the next callback on
    if meter_provider is not None:
        _CFG.meter_provider = meter_provider
        _CFG.histogram = None
    if clock is not None:
        _CFG.clock = clock
        for state in list(_STATES):
            state.clock = clock
            if state.cb_start is not None:  # switched inside a callback: time it from now
                state.cb_start = clock()


# --- per-thread state and per-trajectory accounts -----------------------------------------
class _Account:
    """One trajectory's figures while it runs (nanoseconds of the monitor's clock)."""

    __slots__ = ("env_class", "own", "parent", "root", "slow", "slow_at_start", "stalls", "state")

    def __init__(self, state: _State, root: Any, env_class: Any, parent: _Account | None):
        self.state = state
        self.root = root
        self.env_class = env_class
        self.parent = parent
        self.own = 0
        self.slow = 0  # own time in slow callbacks
        self.stalls = 0
        self.slow_at_start = state.slow_total


class _State:
    """The loop thread's figures: the callback running now, and all slow time so far."""

    __slots__ = ("cb_acct", "cb_culprit", "cb_start", "clock", "slow_total")

    def __init__(self) -> None:
        self.clock = _CFG.clock
        self.slow_total = 0
        self.cb_start: int | None = None
        self.cb_acct: _Account | None = None
        self.cb_culprit: tuple[int, str, Any] | None = None  # (ns in phase, phase, span)


_ACCOUNT: ContextVar[_Account | None] = ContextVar("otel_rollout_loop_account", default=None)
_tls = threading.local()
_STATES: list[_State] = []  # for configure_loop_stalls(clock=...) in tests
_install_lock = threading.Lock()
#: asyncio's own ``Handle._run``, taken at import (the wrapper always calls this one).
_RUN: Callable[[Any], None] = asyncio.events.Handle._run
_installed = False
#: True once a trajectory has begun on a timed loop (the wrapper installed): the tracer's
#: phase hook checks it first, so that a process without one never calls it.
ACTIVE = False


def _timed_run(handle: Any) -> None:
    state: _State | None = getattr(_tls, "state", None)
    if state is None:  # no trajectory has run on this thread yet
        try:
            _RUN(handle)
        finally:
            state = getattr(_tls, "state", None)
            if state is not None and state.cb_start is not None:  # the first one began
                _done(state, handle._context)
        return
    ctx = handle._context
    state.cb_acct = ctx.get(_ACCOUNT)
    state.cb_culprit = None
    state.cb_start = state.clock()
    try:
        _RUN(handle)
    finally:
        _done(state, ctx)


def _done(state: _State, ctx: Any) -> None:
    """Charge the callback running now, which has just returned."""
    d = state.clock() - state.cb_start  # type: ignore[operator]  # set when it began
    state.cb_start = None
    acct = state.cb_acct
    if acct is not None:
        acct.own += d
    if d >= _CFG.threshold_ns:
        state.slow_total += d
        if acct is not None:
            acct.slow += d
            acct.stalls += 1
        try:
            _stall(state, acct, d, ctx)
        except Exception as err:
            internal_error("loop stall", err)


def _install() -> None:
    """Wrap ``Handle._run``, once per process."""
    global _installed
    with _install_lock:
        if not _installed:
            asyncio.events.Handle._run = _timed_run  # type: ignore[method-assign,assignment]
            _installed = True


def _uninstall() -> None:
    """Restore ``Handle._run`` (tests, benchmarks)."""
    global _installed, ACTIVE
    with _install_lock:
        if _installed and asyncio.events.Handle._run is _timed_run:
            asyncio.events.Handle._run = _RUN  # type: ignore[method-assign,assignment]
            _installed = ACTIVE = False


def prepare() -> None:
    """Install the callback timer now, if on, so that the first trajectory's first callback
    is timed too (called when a tracer is made)."""
    if _CFG.enabled:
        _install()


def begin(root: Any, env_class: Any) -> tuple[_Account, Any] | None:
    """Start the account of a trajectory starting now (called by the trajectory scope);
    None when not measured (off, no running loop, a loop that cannot be timed)."""
    global ACTIVE
    if not _CFG.enabled:
        return None
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    try:
        if not isinstance(loop, asyncio.BaseEventLoop):
            warn_once(
                "loopstall:loop",
                "otel-rollout: the running event loop (%s) runs callbacks its own way, so "
                "loop stalls (loop_own, loop_blocked) are not measured; they are with "
                "asyncio's default loop.",
                f"{type(loop).__module__}.{type(loop).__qualname__}",
            )
            return None
        _install()
        ACTIVE = True
        state = getattr(_tls, "state", None)
        if state is None:  # the first on this thread: time the running callback from now
            state = _State()
            acct = _Account(state, root, env_class, None)
            state.cb_start, state.cb_acct = state.clock(), acct
            _STATES.append(state)
            _tls.state = state
        else:
            acct = _Account(state, root, env_class, _ACCOUNT.get())
            if state.cb_start is not None:  # only this callback's part from now on is its
                acct.own -= state.clock() - state.cb_start
                state.cb_acct = acct
        return acct, _ACCOUNT.set(acct)
    except Exception as err:
        internal_error("loop stall begin", err)
        return None


def finish(handle: tuple[_Account, Any]) -> dict[str, int]:
    """End a trajectory's account: its root attributes (``rollout.loop.*``)."""
    acct, token = handle
    state = acct.state
    own, slow, stalls = acct.own, acct.slow, acct.stalls
    blocked = state.slow_total - acct.slow_at_start - slow
    if state.cb_start is not None and state.cb_acct is acct:  # the callback running now
        now = state.clock() - state.cb_start
        own += now
        if now >= _CFG.threshold_ns:  # already a stall of its own
            slow, stalls = slow + now, stalls + 1
        state.cb_acct = acct.parent
    with contextlib.suppress(ValueError):  # ended in another context: nothing to restore
        _ACCOUNT.reset(token)
    return {
        A.LOOP_OWN_NS: own,
        A.LOOP_BLOCKED_NS: max(0, blocked),
        A.LOOP_STALL_NS: slow,
        A.LOOP_STALLS: stalls,
    }


# --- stalls: the event and the metric ------------------------------------------------------
def phase_ending(span: Any) -> None:
    """Called just before a phase span ends: when the callback running now has spent at
    least the threshold inside this phase, the phase is the stall's culprit (the span is
    still open, so the event goes on it)."""
    state: _State | None = getattr(_tls, "state", None)
    if state is None or state.cb_start is None or state.cb_acct is None:
        return
    try:
        in_cb = state.clock() - state.cb_start
        if in_cb < _CFG.threshold_ns:
            return
        start = getattr(span, "start_time", None)
        in_phase = min(in_cb, now_ns() - start) if isinstance(start, int) else in_cb
        if in_phase < _CFG.threshold_ns:
            return
        culprit = state.cb_culprit
        if culprit is None or in_phase > culprit[0]:
            attrs = getattr(span, "attributes", None) or {}
            phase = str(attrs.get(A.PHASE, A.CULPRIT_NO_PHASE))
            state.cb_culprit = (in_phase, phase, span)
            span.add_event(
                A.EVENT_LOOP_STALL,
                {A.LOOP_STALL_DURATION: in_phase * 1e-9, A.LOOP_STALL_CULPRIT: phase},
            )
    except Exception as err:
        internal_error("loop stall phase", err)


def _stall(state: _State, acct: _Account | None, d: int, ctx: Any) -> None:
    culprit = state.cb_culprit
    state.cb_culprit = None
    phase: object  # an attribute's value, shown as str
    if acct is None:
        phase = A.CULPRIT_OUTSIDE
    elif culprit is not None:
        phase = culprit[1]
    else:  # no phase ended inside it: the culprit's current span (a phase, or the root)
        span = ctx.run(trace.get_current_span)
        attrs = getattr(span, "attributes", None) or {}
        phase = attrs.get(A.PHASE)
        if phase is None or not span.is_recording():
            span, phase = acct.root, A.CULPRIT_NO_PHASE
        if span is not None and span.is_recording():
            span.add_event(
                A.EVENT_LOOP_STALL,
                {A.LOOP_STALL_DURATION: d * 1e-9, A.LOOP_STALL_CULPRIT: str(phase)},
            )
    labels: dict[str, Any] = {A.PHASE: str(phase)}
    if acct is not None and acct.env_class is not None:
        labels[A.ENV_CLASS] = acct.env_class
    _histogram().record(d * 1e-9, labels)


def _histogram() -> metrics.Histogram:
    hist = _CFG.histogram
    if hist is None:
        meter = (_CFG.meter_provider or metrics.get_meter_provider()).get_meter(
            "otel_rollout", __version__
        )
        hist = _CFG.histogram = meter.create_histogram(
            A.METRIC_LOOP_STALL, unit="s",
            description="Event-loop callbacks above the stall threshold, by culprit phase.",
            explicit_bucket_boundaries_advisory=list(A.DURATION_BUCKETS))  # fmt: skip
    return hist


def _reset_after_fork() -> None:
    _tls.__dict__.pop("state", None)
    _STATES.clear()


os.register_at_fork(after_in_child=_reset_after_fork)
