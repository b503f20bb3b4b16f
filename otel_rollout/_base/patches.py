"""Methods wrapped on their classes with ``wrapt``, and restored exactly; each wrapper
steps aside (calls the original untouched) while OpenTelemetry instrumentation is
suppressed (``opentelemetry.instrumentation.utils.suppress_instrumentation``). The
instrumentors' shared patching toolkit, public as :class:`otel_rollout.instrumentation.Patches`;
``wrapt`` and ``opentelemetry-instrumentation`` (the integrations' extras) are imported
when something is wrapped. Also the sampling parameters of a generate request as
``Trajectory.generate()``'s keywords (:func:`sampling_keywords`), shared by the
instrumentors."""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Mapping
from types import MappingProxyType, ModuleType
from typing import Any

from otel_rollout._base.errors import warn_once

_ABSENT = object()


def _unless_suppressed(wrapper: Any) -> Any:
    from opentelemetry.instrumentation.utils import is_instrumentation_enabled

    def guarded(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
        if not is_instrumentation_enabled():
            return wrapped(*args, **kwargs)
        return wrapper(wrapped, instance, args, kwargs)

    return guarded


def _unwrapped(original: Any) -> Any:
    return original


class InstanceCall:
    """A callable that lives on one instance (a mock, a ``functools.partial``, a function
    set as an attribute), called through ``wrapper`` as wrapt would call it. Pickled, it
    is the original again (SkyRL pickles its clients; the copy is wrapped anew where it
    is instrumented)."""

    __slots__ = ("__wrapped__", "_wrapper")

    def __init__(self, original: Any, wrapper: Any) -> None:
        self.__wrapped__ = original
        self._wrapper = wrapper

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._wrapper(self.__wrapped__, None, args, kwargs)

    def __reduce__(self) -> tuple[Any, tuple[Any]]:
        return _unwrapped, (self.__wrapped__,)


class Patches:
    """Methods wrapped on their classes (never on instances where the class has the
    method: SkyRL pickles its clients), each restored exactly by :meth:`restore`;
    :meth:`wrap_resolved` wraps on the instance what only the instance has."""

    def __init__(self) -> None:
        self._done: dict[tuple[type | ModuleType, str], Any] = {}
        self._on_instances: list[tuple[Any, str, Any]] = []

    def wrap_resolved(self, obj: Any, name: str, wrapper: Any) -> bool:
        """Wrap what ``obj.<name>`` resolves to: the class's method on the class, else
        (an instance attribute: a mock, a partial) on the instance. False when there is
        nothing callable to wrap, or it is wrapped already."""
        cls = type(obj)
        own = getattr(obj, "__dict__", None) or {}
        if name not in own and callable(getattr(cls, name, None)):
            return self.wrap(cls, name, wrapper)
        try:
            resolved = getattr(obj, name)
        except Exception:  # whatever the object raises: it has nothing to wrap
            return False
        if not callable(resolved) or isinstance(resolved, InstanceCall):
            return False
        try:
            ref = weakref.ref(obj)
            setattr(obj, name, InstanceCall(resolved, _unless_suppressed(wrapper)))
        except (TypeError, AttributeError) as exc:  # no __weakref__, slots, read-only
            warn_once(f"instance-{cls.__qualname__}.{name}",
                      "otel-rollout: %s.%s is the instance's own and cannot be wrapped there "
                      "(%s): its calls get no spans and no traceparent", cls.__qualname__,
                      name, exc)  # fmt: skip
            return False
        self._on_instances.append((ref, name, resolved))
        return True

    def wrap(self, cls: type | ModuleType, name: str, wrapper: Any) -> bool:
        key = (cls, name)
        if key in self._done or not callable(getattr(cls, name, None)):
            return False
        import wrapt

        self._done[key] = cls.__dict__.get(name, _ABSENT)
        wrapt.wrap_function_wrapper(cls, name, _unless_suppressed(wrapper))
        return True

    def restore(self) -> None:
        for ref, name, original in self._on_instances:
            obj = ref()
            if obj is not None:
                with contextlib.suppress(Exception):
                    setattr(obj, name, original)
        self._on_instances.clear()
        for (cls, name), original in self._done.items():
            with contextlib.suppress(Exception):
                if original is _ABSENT:  # inherited: drop the wrapper from the subclass
                    delattr(cls, name)
                else:
                    setattr(cls, name, original)
        self._done.clear()


#: A sampling parameter's name in a trainer's or an engine's request and the
#: ``generate()`` keyword it is; where several name one keyword, the first present wins.
SAMPLING_KEYS: Mapping[str, str] = MappingProxyType({
    "max_tokens": "max_tokens",
    "max_generate_length": "max_tokens",  # SkyRL's backend dicts
    "max_new_tokens": "max_tokens",  # Hugging Face, verl, SkyRL
    "max_completion_tokens": "max_tokens",  # OpenAI's chat completions
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "seed": "seed",
    "n": "n",
})  # fmt: skip


def sampling_keywords(params: Any) -> dict[str, int | float]:
    """The ``generate()`` keywords of a request's sampling parameters (a dict): each
    number under a name of :data:`SAMPLING_KEYS`; anything else (``None``, booleans,
    strings, a ``params`` that is no dict) is left out."""
    out: dict[str, int | float] = {}
    if not isinstance(params, Mapping):
        return out
    for key, name in SAMPLING_KEYS.items():
        value = params.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            out.setdefault(name, value)
    return out
