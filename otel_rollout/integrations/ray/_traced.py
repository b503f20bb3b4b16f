"""``@traced``: a remote function or actor method that takes a carrier and reports back."""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from otel_rollout.integrations.ray._gather import GATHERER_NAME, _ray, push, push_failed
from otel_rollout.integrations.ray._propagation import CARRIER_KWARG, extract, step_context
from otel_rollout.integrations.ray._worker import drain
from otel_rollout.integrations.ray._worker import flush as flush_now

F = TypeVar("F", bound=Callable[..., Any])


class _After:
    """What a call does when it ends: push its breakdowns to a gatherer, flush."""

    __slots__ = ("flush", "gather")

    def __init__(self, flush: bool, gather: str | None) -> None:
        self.flush, self.gather = flush, gather

    def run(self) -> None:
        if self.gather and (items := drain()):
            try:
                _ray().get(push(breakdowns=items, name=self.gather))
            except Exception as err:
                push_failed(items, self.gather, err)
        if self.flush:
            flush_now()

    async def run_async(self) -> None:
        if self.gather and (items := drain()):
            try:
                await push(breakdowns=items, name=self.gather)
            except Exception as err:
                push_failed(items, self.gather, err)
        if self.flush:
            await asyncio.to_thread(flush_now)


def _signature_with(fn: Callable[..., Any], kwarg: str) -> inspect.Signature | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(sig.parameters.values())
    if kwarg in sig.parameters:
        return sig
    extra = inspect.Parameter(kwarg, inspect.Parameter.KEYWORD_ONLY, default=None)
    at = len(params)
    if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
        at -= 1
    params.insert(at, extra)
    return sig.replace(parameters=params)


def traced(
    fn: F | None = None,
    *,
    flush: bool = True,
    gather: bool | str = False,
    kwarg: str = CARRIER_KWARG,
) -> Any:
    """Decorate a remote function or actor method (sync, async, a generator: its kind
    kept) so that ``f.remote(x, otel_carrier=otel_ray.carrier())`` runs with the caller's
    context current; without a carrier it runs as undecorated. ``flush`` exports this
    process's telemetry when the call ends; ``gather`` (True, or a gatherer name) pushes
    its breakdowns to the :func:`gatherer` and waits for it (docs/ray.md)."""
    if fn is None:
        return functools.partial(traced, flush=flush, gather=gather, kwarg=kwarg)
    sig = _signature_with(fn, kwarg)
    passes_through = sig is not None and kwarg in inspect.signature(fn).parameters
    after = _After(flush, GATHERER_NAME if gather is True else (gather or None))

    def enter(kwargs: dict[str, Any]) -> contextvars.Context:
        """The context the call's body runs in: the carrier's, attached to a copy."""
        headers = kwargs.get(kwarg) if passes_through else kwargs.pop(kwarg, None)
        return step_context(extract(headers), headers)

    # One shape for the four kinds: the body (each step of a generator) runs in the
    # carrier's context, then ``after`` runs, however the body ends.
    wrapper: Callable[..., Any]
    if inspect.isasyncgenfunction(fn):

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = enter(kwargs)
            loop = asyncio.get_running_loop()
            agen = fn(*args, **kwargs)
            try:
                while True:
                    try:
                        item = await loop.create_task(agen.__anext__(), context=ctx)
                    except StopAsyncIteration:
                        return
                    yield item
            finally:
                await loop.create_task(agen.aclose(), context=ctx)
                await after.run_async()

    elif inspect.iscoroutinefunction(fn):

        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = enter(kwargs)
            try:
                return await asyncio.get_running_loop().create_task(
                    fn(*args, **kwargs), context=ctx
                )
            finally:
                await after.run_async()

    elif inspect.isgeneratorfunction(fn):

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = enter(kwargs)
            gen = fn(*args, **kwargs)
            try:
                while True:
                    try:
                        item = ctx.run(next, gen)
                    except StopIteration as stop:
                        return stop.value
                    yield item
            finally:
                ctx.run(gen.close)
                after.run()

    else:

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            ctx = enter(kwargs)
            try:
                return ctx.run(fn, *args, **kwargs)
            finally:
                after.run()

    out = functools.update_wrapper(wrapper, fn)
    # Ray unwraps actor methods (inspect.unwrap) to read their signature: without
    # ``__wrapped__`` it reads ``__signature__``, which accepts the carrier keyword.
    del out.__wrapped__
    if sig is not None:
        out.__signature__ = sig  # type: ignore[attr-defined]  # read by inspect, not declared
    return out
