"""``VerifiersInstrumentor``: wraps ``Rollout.open/step/close/abort`` (a trajectory per
rollout), the eval and train clients' upstream calls and ``InterceptionServer.
record_call`` (a ``generate`` span per model call, its traceparent sent upstream), and
the eval runner's ``gather_rollouts`` (a batch per evaluation); ``uninstrument()``
restores each."""

from __future__ import annotations

import importlib
from collections.abc import Collection
from time import time_ns
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from otel_rollout import RolloutTracer, current_batch
from otel_rollout.instrumentation import internal_error
from otel_rollout.integrations import require
from otel_rollout.integrations.skyrl._patches import Patches
from otel_rollout.integrations.verifiers._calls import client_wrapper, record_call_wrapper
from otel_rollout.integrations.verifiers._rollout import Starting, current, finish
from otel_rollout.integrations.verifiers._state import Rollouts, pinning, to_ns

ROLLOUT_MODULE = "verifiers.v1.rollout"
TRACE_MODULE = "verifiers.v1.trace"
INTERCEPTION_MODULE = "verifiers.v1.interception.server"
#: Upstream clients whose calls open a generate span: (module, class, methods).
CLIENTS = (
    ("verifiers.v1.clients.eval", "EvalClient", ("relay", "get_response")),
    ("verifiers.v1.clients.train", "TrainClient", ("get_response",)),
)
#: Where ``vf-eval`` fans an evaluation's rollouts out: one batch per call.
EVAL_RUNNER_MODULE = "verifiers.v1.cli.eval.runner"
#: The status of a rollout aborted, or still in flight when instrumentation is removed.
ABORTED = "aborted"
#: The batch span's attribute naming what opened it.
BATCH_SOURCE = "verifiers.batch.source"


class VerifiersInstrumentor(BaseInstrumentor):
    """Instrument verifiers' rollouts; ``instrument()`` is idempotent."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        rollout_mod = require(ROLLOUT_MODULE, "verifiers")
        tracer = _tracer(kwargs)
        self._rollout_tracer = tracer
        patches = self._patches = Patches()
        rollouts = self._rollouts = Rollouts()
        state_of = rollouts.of
        cls = rollout_mod.Rollout

        trace_mod = require(TRACE_MODULE, "verifiers")
        # The root starts where verifiers' boot does: at the first notify with it set.
        notified = patches.wrap(trace_mod.Trace, "notify", _notify_wrapper(rollouts))

        async def traced_open(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
            state = state_of(instance)
            if state is not None:  # opened again: verifiers returns at once
                with current(state):
                    return await wrapped(*args, **kw)
            starting = Starting(tracer, rollouts, instance)
            trace_id = str(instance.trace.id)
            try:
                if notified:
                    rollouts.starting[trace_id] = starting
                else:  # no notify to start at: now
                    starting.start(None)
            except Exception as exc:
                internal_error("verifiers rollout start", exc)
                return await wrapped(*args, **kw)
            try:
                return await wrapped(*args, **kw)
            finally:
                if rollouts.starting.get(trace_id) is starting:
                    del rollouts.starting[trace_id]
                starting.release()

        async def traced_step(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
            state = state_of(instance)
            if state is None:
                return await wrapped(*args, **kw)
            with current(state):
                return await wrapped(*args, **kw)

        def ending(status: str | None) -> Any:
            async def traced_end(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
                state = state_of(instance)
                if state is None:
                    return await wrapped(*args, **kw)
                try:
                    with current(state):
                        result = await wrapped(*args, **kw)
                except BaseException as exc:
                    finish(rollouts, state, instance, exc, status)
                    raise
                finish(rollouts, state, instance, None, status)
                return result

            return traced_end

        patches.wrap(cls, "open", traced_open)
        patches.wrap(cls, "step", traced_step)
        patches.wrap(cls, "close", ending(None))
        patches.wrap(cls, "abort", ending(ABORTED))
        server = require(INTERCEPTION_MODULE, "verifiers")
        patches.wrap(server.InterceptionServer, "record_call", record_call_wrapper(rollouts))
        for module, name, methods in CLIENTS:
            try:
                client_cls = getattr(importlib.import_module(module), name)
            except Exception:  # this verifiers has no such client (or lacks its deps)
                continue
            for method in methods:
                original = getattr(client_cls, method, None)
                if original is not None:
                    patches.wrap(client_cls, method, client_wrapper(original, rollouts))
        try:
            runner = importlib.import_module(EVAL_RUNNER_MODULE)
        except Exception:  # the CLI's dependencies missing: no eval batches
            runner = None
        if runner is not None and callable(getattr(runner, "gather_rollouts", None)):

            async def traced_gather(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
                if current_batch() is not None:  # the user's own batch (a training step)
                    return await wrapped(*args, **kw)
                async with tracer.batch(attributes={BATCH_SOURCE: "vf-eval"}):
                    return await wrapped(*args, **kw)

            self._runner = runner
            self._real_gather = runner.gather_rollouts
            from wrapt import FunctionWrapper

            runner.gather_rollouts = FunctionWrapper(self._real_gather, _guard(traced_gather))

    def _uninstrument(self, **kwargs: Any) -> None:
        self._patches.restore()
        for state in self._rollouts.in_flight():  # their close() is no longer traced
            finish(self._rollouts, state, state.rollout, None, ABORTED)
        runner = getattr(self, "_runner", None)
        if runner is not None:
            runner.gather_rollouts = self._real_gather
            self._runner = None
        self._rollouts.clear()


def _tracer(kwargs: dict[str, Any]) -> RolloutTracer:
    """The tracer of ``instrument(rollout_tracer=)`` (or of ``tracer_provider=``,
    ``meter_provider=``, ``processor=``; else of ``otel_rollout.configure()``'s
    pipeline), on a clock that can be pinned to verifiers' timestamps where a root
    starts and ends."""
    given = kwargs.get("rollout_tracer")
    if given is None and kwargs.get("tracer_provider") is None:
        from otel_rollout import get_rollout

        configured = get_rollout()  # configure()'s pipeline, when there is one
        given = configured.tracer if configured is not None else None
    if given is not None:
        return RolloutTracer(
            getattr(given, "_provider", None),
            getattr(given, "_meter_provider", None),
            processor=given.processor,
            clock=pinning(getattr(given, "_clock", None) or time_ns),
        )
    return RolloutTracer(
        kwargs.get("tracer_provider"),
        kwargs.get("meter_provider"),
        processor=kwargs.get("processor"),
        clock=pinning(),
    )


def _notify_wrapper(rollouts: Rollouts) -> Any:
    """``Trace.notify``: start the root of an opening rollout at its boot start."""
    starting_by_id = rollouts.starting

    def traced_notify(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if starting_by_id:
            starting = starting_by_id.get(getattr(instance, "id", None))
            timing = getattr(instance, "timing", None)
            boot = getattr(getattr(timing, "boot", None), "start", 0.0)
            if starting is not None and boot:
                del starting_by_id[instance.id]
                try:
                    starting.start(to_ns(boot))
                except Exception as exc:
                    internal_error("verifiers rollout start", exc)
        return wrapped(*args, **kwargs)

    return traced_notify


def _guard(wrapper: Any) -> Any:
    """Step aside while instrumentation is suppressed."""
    from opentelemetry.instrumentation.utils import is_instrumentation_enabled

    def guarded(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if not is_instrumentation_enabled():
            return wrapped(*args, **kwargs)
        return wrapper(wrapped, instance, args, kwargs)

    return guarded
