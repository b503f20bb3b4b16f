"""Trace context across Ray calls: a W3C carrier made by the caller, attached by the
callee; spans and providers are never pickled."""

from __future__ import annotations

import contextvars
from collections.abc import Mapping
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import propagate

from otel_rollout.instrumentation import (
    attach_batch,
    batch_carrier,
    batch_from_carrier,
    detach_batch,
)

#: The keyword argument :func:`~otel_rollout.integrations.ray.traced` adds to a remote
#: function or actor method.
CARRIER_KWARG = "otel_carrier"


def suppressed(context: otel_context.Context | None = None) -> bool:
    """Whether OpenTelemetry instrumentation is suppressed in ``context`` (default: now)."""
    key = getattr(otel_context, "_SUPPRESS_INSTRUMENTATION_KEY", None)
    return bool(key is not None and otel_context.get_value(key, context))


def carrier(context: otel_context.Context | None = None) -> dict[str, str]:
    """The current (or given) trace context as W3C headers, and the current batch, to
    send with a work item; empty while instrumentation is suppressed."""
    out: dict[str, str] = {}
    if not suppressed(context):
        propagate.inject(out, context=context)
        out.update(batch_carrier())
    return out


def extract(headers: Mapping[str, str] | None) -> otel_context.Context | None:
    """The context a carrier holds (on top of the current one), or None for no carrier."""
    if not headers:
        return None
    return propagate.extract(dict(headers))


def step_context(
    ctx: otel_context.Context | None, headers: Mapping[str, str] | None = None
) -> contextvars.Context:
    """A contextvars context with ``ctx`` and the batch of the carrier ``headers`` current,
    in which a call's body (each step of a generator) runs."""
    step = contextvars.copy_context()
    if ctx is not None:
        step.run(otel_context.attach, ctx)
    batch = batch_from_carrier(headers)
    if batch is not None:
        step.run(attach_batch, batch)
    return step


class attached:
    """Make the context of a :func:`carrier` current (``with`` or ``async with``; an empty
    carrier changes nothing), yielding it."""

    __slots__ = ("_batch", "_batch_token", "_ctx", "_token")

    def __init__(self, headers: Mapping[str, str] | None) -> None:
        self._ctx = extract(headers)
        self._batch = batch_from_carrier(headers)
        self._token: Any = None
        self._batch_token: Any = None

    def __enter__(self) -> otel_context.Context:
        if self._batch is not None:
            self._batch_token = attach_batch(self._batch)
        if self._ctx is None:
            return otel_context.get_current()
        self._token = otel_context.attach(self._ctx)
        return self._ctx

    def __exit__(self, *exc: Any) -> None:
        if self._token is not None:
            otel_context.detach(self._token)
            self._token = None
        if self._batch_token is not None:
            detach_batch(self._batch_token)
            self._batch_token = None

    async def __aenter__(self) -> otel_context.Context:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.__exit__()
