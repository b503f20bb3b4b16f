"""``VerifiersInstrumentor``: what is patched in verifiers (``Rollout``'s lifecycle, the
clients' upstream calls, ``record_call``, the eval runner's fan-out), and undoing it."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import AsyncIterator, Collection
from contextvars import ContextVar
from time import time_ns
from typing import Any

from opentelemetry.instrumentation.instrumentor import BaseInstrumentor

from otel_rollout import RolloutTracer, current_batch
from otel_rollout.instrumentation import Patches, internal_error, require
from otel_rollout.integrations.verifiers._calls import client_wrapper, record_call_wrapper
from otel_rollout.integrations.verifiers._rollout import Starting, current, finish
from otel_rollout.integrations.verifiers._state import Rollouts, pinning, to_ns

#: The distribution instrumented and the versions supported: ``instrument()`` checks it
#: (``instrument(skip_dep_check=True)`` does not), ``opentelemetry-instrument`` too.
_instruments = ("verifiers >= 0.4",)

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
#: The runner's serving block, called with the eval's config around the fan-out.
SERVING = "_in_process"
#: The status of a rollout aborted, or still in flight when instrumentation is removed.
ABORTED = "aborted"
#: The batch span's attribute naming what opened it.
BATCH_SOURCE = "verifiers.batch.source"
#: The eval's bound on concurrent episodes (``EvalConfig.max_concurrent``: verifiers
#: holds one permit per episode across the whole of it), while the runner's serving block
#: (``_in_process(env, config, ...)``, inside which it gathers the rollouts) is open.
_EVAL_CONCURRENCY: ContextVar[int | None] = ContextVar(
    "otel_rollout_verifiers_concurrency", default=None
)


class VerifiersInstrumentor(BaseInstrumentor):
    """Instrument verifiers' rollouts; ``instrument()`` is idempotent."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        rollout_mod = require(ROLLOUT_MODULE, "verifiers")
        tracer = self._rollout_tracer = _tracer(kwargs)
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
            return

        async def traced_gather(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
            if current_batch() is not None:  # the user's own batch (a training step)
                return await wrapped(*args, **kw)
            concurrency = _EVAL_CONCURRENCY.get()
            async with tracer.batch(attributes={BATCH_SOURCE: "vf-eval"}, concurrency=concurrency):
                return await wrapped(*args, **kw)

        def traced_serving(wrapped: Any, instance: Any, args: tuple, kw: dict) -> Any:
            block = wrapped(*args, **kw)
            if not (hasattr(block, "__aenter__") and hasattr(block, "__aexit__")):
                return block  # not the serving block this knows: left as it is
            config = args[1] if len(args) > 1 else kw.get("config")
            return _declaring(block, _max_concurrent(config))

        if patches.wrap(runner, "gather_rollouts", traced_gather):
            patches.wrap(runner, SERVING, traced_serving)

    def _uninstrument(self, **kwargs: Any) -> None:
        self._patches.restore()
        for state in self._rollouts.in_flight():  # their close() is no longer traced
            finish(self._rollouts, state, state.rollout, None, ABORTED)
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
            starting = starting_by_id.get(getattr(instance, "id", ""))
            boot = getattr(getattr(getattr(instance, "timing", None), "boot", None), "start", 0.0)
            if starting is not None and boot:
                del starting_by_id[instance.id]
                try:
                    starting.start(to_ns(boot))
                except Exception as exc:
                    internal_error("verifiers rollout start", exc)
        return wrapped(*args, **kwargs)

    return traced_notify


def _max_concurrent(config: Any) -> int | None:
    """The eval config's ``max_concurrent`` when it is a count of at least 1, else None."""
    value = getattr(config, "max_concurrent", None)
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    return value if ok else None


@contextlib.asynccontextmanager
async def _declaring(block: Any, concurrency: int | None) -> AsyncIterator[Any]:
    """``block`` (an async context manager), with :data:`_EVAL_CONCURRENCY` set inside."""
    token = _EVAL_CONCURRENCY.set(concurrency)
    try:
        async with block as value:
            yield value
    finally:
        with contextlib.suppress(ValueError):  # exited in another context: nothing to undo
            _EVAL_CONCURRENCY.reset(token)
