"""``otel_rollout.phase``: a phase of the current trajectory as a decorator or a context
manager, doing nothing outside a trajectory."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from opentelemetry import trace

from otel_rollout import attributes as A
from otel_rollout._api.phase_handles import Phase
from otel_rollout._api.phase_scope import _PhaseScope
from otel_rollout._api.trajectory import current_trajectory

F = TypeVar("F", bound=Callable[..., Any])


class phase:
    """A phase of the current trajectory, as a decorator or a context manager.

    ``@otel_rollout.phase("llm")`` on a function or coroutine function opens a phase span
    around each call inside a trajectory (and does nothing outside one). Known names
    (``llm``, ``env``, ``env_setup``, ``env_teardown``) use the standard span names. One
    object may be shared: by concurrent tasks and threads, and entered again.
    """

    _SPANS: ClassVar[dict[str, str]] = {
        A.PHASE_LLM: A.SPAN_GENERATE,
        A.PHASE_ENV: A.SPAN_ENV_STEP,
        A.PHASE_ENV_SETUP: A.SPAN_ENV_SETUP,
        A.PHASE_ENV_TEARDOWN: A.SPAN_ENV_TEARDOWN,
    }

    def __init__(self, name: str, **attributes: Any) -> None:
        if not name or not isinstance(name, str):
            raise ValueError(f"phase name must be a non-empty string, got {name!r}")
        self.name = name
        self.attributes = attributes
        self._scopes: list[_PhaseScope] = []

    def _open(self) -> _PhaseScope | None:
        traj = current_trajectory()
        if traj is None:
            return None
        if self.name == A.PHASE_LLM:
            return traj.generate(**self.attributes)
        if self.name == A.PHASE_ENV:
            return traj.env_step(**self.attributes)
        return traj._scope(self._SPANS.get(self.name, self.name), self.name, self.attributes, Phase)

    def __call__(self, fn: F) -> F:
        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                scope = self._open()
                if scope is None:
                    return await fn(*args, **kwargs)
                with scope:
                    return await fn(*args, **kwargs)

            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            scope = self._open()
            if scope is None:
                return fn(*args, **kwargs)
            with scope:
                return fn(*args, **kwargs)

        return wrapper  # type: ignore[return-value]

    def __enter__(self) -> Phase | None:
        scope = self._open()
        if scope is None:
            self._scopes.append(None)  # type: ignore[arg-type]
            return None
        handle = scope.__enter__()
        self._scopes.append(scope)
        return handle

    def __exit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        scope = self._pop()
        if scope is not None:
            scope.__exit__(exc_type, exc, tb)

    def _pop(self) -> _PhaseScope | None:
        """The scope this context entered (its span is current), else the latest."""
        scopes = self._scopes
        if not scopes:
            return None
        current = trace.get_current_span()
        for scope in reversed(scopes):
            if scope is not None and scope._open and scope._open[-1][0].span is current:
                scopes.remove(scope)
                return scope
        if None in scopes:  # a context that entered outside any trajectory
            scopes.remove(None)  # type: ignore[arg-type]
            return None
        return scopes.pop()

    async def __aenter__(self) -> Phase | None:
        return self.__enter__()

    async def __aexit__(self, exc_type: Any, exc: BaseException | None, tb: Any) -> None:
        self.__exit__(exc_type, exc, tb)
