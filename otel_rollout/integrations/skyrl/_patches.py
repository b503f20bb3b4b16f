"""Methods wrapped on their classes with ``wrapt``, and restored exactly; each wrapper
steps aside (calls the original untouched) while OpenTelemetry instrumentation is
suppressed (``opentelemetry.instrumentation.utils.suppress_instrumentation``)."""

from __future__ import annotations

import contextlib
from typing import Any

import wrapt
from opentelemetry.instrumentation.utils import is_instrumentation_enabled

_ABSENT = object()


def _unless_suppressed(wrapper: Any) -> Any:
    def guarded(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if not is_instrumentation_enabled():
            return wrapped(*args, **kwargs)
        return wrapper(wrapped, instance, args, kwargs)

    return guarded


class Patches:
    """Methods wrapped on their classes (never on instances: SkyRL pickles its clients),
    each restored exactly by :meth:`restore`."""

    def __init__(self) -> None:
        self._done: dict[tuple[type, str], Any] = {}

    def wrap(self, cls: type, name: str, wrapper: Any) -> bool:
        key = (cls, name)
        if key in self._done or not callable(getattr(cls, name, None)):
            return False
        self._done[key] = cls.__dict__.get(name, _ABSENT)
        wrapt.wrap_function_wrapper(cls, name, _unless_suppressed(wrapper))
        return True

    def restore(self) -> None:
        for (cls, name), original in self._done.items():
            with contextlib.suppress(Exception):
                if original is _ABSENT:  # inherited: drop the wrapper from the subclass
                    delattr(cls, name)
                else:
                    setattr(cls, name, original)
        self._done.clear()
