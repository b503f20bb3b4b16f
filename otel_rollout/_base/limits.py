"""otel-rollout's own attributes survive the span attribute limit
(``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``, 128): the SDK evicts a span's oldest attribute for each
new one, so where a span dropped some, the ones otel-rollout needs are set again just before
it ends, the most needed last, and the user is told once, with a count (the SDK's warning
per attribute is filtered out)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.trace import SpanLimits

from otel_rollout import attributes as A
from otel_rollout._base.errors import warn_once

#: What a trajectory root needs, least needed first: set again in this order, the last
#: ones survive even a limit of 1.
ROOT_KEYS = (
    A.GEN_AI_OPERATION_NAME,
    A.GEN_AI_AGENT_NAME,
    A.GEN_AI_CONVERSATION_ID,
    A.REPETITION_ID,
    A.INSTANCE_ID,
    A.GROUP_ID,
    A.REWARD,
    A.STEP,
    A.BATCH_ID,
    A.STATUS,
    A.GEN_AI_REQUEST_MODEL,
    A.ENV_CLASS,
    A.TRAJECTORY_ID,
)

_SDK_LOGGER = "opentelemetry.attributes"
_SDK_MESSAGE = "Attributes dict is full"


def dropped(span: Any) -> int:
    """How many attributes ``span`` (an SDK span) has dropped so far; 0 if unknown."""
    return getattr(span, "dropped_attributes", 0) or 0


def own_last(values: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """``values`` with ``keys`` moved to the end, in that order: set in this order on a
    span, ``keys`` are the last to be evicted by the attribute limit."""
    out = {k: v for k, v in values.items() if k not in keys}
    out.update((k, values[k]) for k in keys if k in values)
    return out


def keep(span: Any, values: Mapping[str, Any], keys: tuple[str, ...]) -> int:
    """Where ``span`` dropped attributes, set ``keys`` again (from ``values``, in that
    order) so that they are its newest; returns how many it had dropped. Never raises."""
    n = dropped(span)
    if not n:
        return 0
    try:
        again = {k: values[k] for k in keys if values.get(k) is not None}
        if again:
            span.set_attributes(again)
        limit = SpanLimits().max_span_attributes  # the process's limit, as configured
        warn_once(
            "attribute-limit",
            "otel-rollout: a span dropped %d attributes past the span attribute limit (%s, "
            "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT); otel-rollout's own (trajectory id, env "
            "class, phase...) were kept. Logged once; the SDK's per-attribute warning is "
            "silenced.",
            n,
            limit,
        )
    except Exception:  # a span of another SDK: nothing more to do
        pass
    return n


def _not_sdk_drop_warning(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith(_SDK_MESSAGE)


def quiet_sdk_drop_warnings() -> None:
    """Filter out the SDK's warning per attribute dropped (10,000 attributes on one span:
    10,000 lines); :func:`keep` says it once, with the count. Idempotent."""
    logger = logging.getLogger(_SDK_LOGGER)
    if _not_sdk_drop_warning not in logger.filters:
        logger.addFilter(_not_sdk_drop_warning)
