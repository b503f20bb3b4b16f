"""Breakdowns gathered in a small actor: workers push, the driver drains."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any

from otel_rollout import Breakdown, BreakdownCollector
from otel_rollout.instrumentation import DEFAULT_MAXLEN, require
from otel_rollout.integrations.ray._worker import drain, rollout

#: The name of the actor :func:`gatherer` creates and :func:`push` finds.
GATHERER_NAME = "otel_rollout_gatherer"

_log = logging.getLogger("otel_rollout.ray")


def _ray() -> Any:
    return require("ray", "ray")


class BreakdownGatherer:
    """The actor behind :func:`gatherer`: workers push breakdowns, the driver drains them."""

    def __init__(self, maxlen: int | None = DEFAULT_MAXLEN) -> None:
        self._collector = BreakdownCollector(maxlen)

    def push(self, breakdowns: Iterable[Breakdown]) -> int:
        self._collector.extend(breakdowns)
        return len(self._collector)

    def drain(self) -> list[Breakdown]:
        return self._collector.drain()

    def count(self) -> int:
        return len(self._collector)

    def dropped(self) -> int:
        return self._collector.dropped


_actor_class: Any = None
_handles: dict[tuple[str, str | None], Any] = {}
_handles_lock = threading.Lock()


def gatherer(name: str = GATHERER_NAME, *, namespace: str | None = None, **options: Any) -> Any:
    """The named :class:`BreakdownGatherer` actor (``num_cpus=0``), created if it does not
    exist yet: in the driver, keeping the handle (or pass ``lifetime="detached"``)."""
    global _actor_class
    ray = _ray()
    if _actor_class is None:
        _actor_class = ray.remote(num_cpus=0)(BreakdownGatherer)
    handle = _actor_class.options(
        name=name, namespace=namespace, get_if_exists=True, **options
    ).remote()
    with _handles_lock:
        _handles[(name, namespace)] = handle
    return handle


def _lookup(name: str, namespace: str | None) -> Any:
    with _handles_lock:
        handle = _handles.get((name, namespace))
    if handle is None:
        ray = _ray()
        if not ray.is_initialized():  # ray.get_actor would start a local cluster
            raise RuntimeError(f"Ray is not initialised: no gatherer {name!r} to push to")
        handle = ray.get_actor(name, namespace=namespace)
        with _handles_lock:
            _handles[(name, namespace)] = handle
    return handle


def push(
    handle: Any = None,
    breakdowns: Iterable[Breakdown] | None = None,
    *,
    name: str = GATHERER_NAME,
    namespace: str | None = None,
) -> Any:
    """Send ``breakdowns`` (default: :func:`drain`) to the gatherer: the push's ObjectRef
    (wait for it before reporting the work done), None when there was nothing to send."""
    items = drain() if breakdowns is None else list(breakdowns)
    if not items:
        return None
    if handle is None:
        handle = _lookup(name, namespace)
    return handle.push.remote(items)


def drain_gathered(
    handle: Any = None,
    *,
    name: str = GATHERER_NAME,
    namespace: str | None = None,
    timeout_s: float | None = 30.0,
) -> list[Breakdown]:
    """Every breakdown pushed to the gatherer since the last drain (in the driver)."""
    if handle is None:
        handle = _lookup(name, namespace)
    return _ray().get(handle.drain.remote(), timeout=timeout_s)


def push_failed(items: list[Breakdown], name: str, err: Exception) -> None:
    """Keep breakdowns a push could not deliver, for a later push or :func:`drain`."""
    _log.warning("otel-rollout: could not push %d breakdowns to the gatherer %r (%s: %s); "
                 "they stay in this process for drain()", len(items), name,
                 type(err).__name__, err)  # fmt: skip
    handle = rollout()
    if handle is not None:
        handle.collector.extend(items)
