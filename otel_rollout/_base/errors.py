"""Internal errors never reach the training run; they are logged once per kind.

Under the project's pytest plugin (or with ``OTEL_ROLLOUT_RAISE_INTERNAL_ERRORS=1``)
they are re-raised instead, so that bugs surface in tests.
"""

from __future__ import annotations

import logging
import threading

from otel_rollout._settings.kinds import env_flag

logger = logging.getLogger("otel_rollout")

_lock = threading.Lock()
_seen: set[str] = set()
_raise = env_flag("OTEL_ROLLOUT_RAISE_INTERNAL_ERRORS")


def set_raise_internal_errors(value: bool) -> bool:
    """Make internal errors raise (tests) or log (production); returns the old value."""
    global _raise
    old, _raise = _raise, bool(value)
    return old


def internal_error(where: str, exc: BaseException) -> None:
    """Report an error inside otel-rollout's own code without breaking the caller."""
    if _raise:
        raise exc
    key = f"{where}:{type(exc).__name__}"
    with _lock:
        first = key not in _seen
        _seen.add(key)
    if first:
        logger.warning("otel-rollout: internal error in %s (reported once per kind): %r", where,
                       exc, exc_info=exc)  # fmt: skip


def warn_once(key: str, message: str, *args: object, level: int = logging.WARNING,
              log: logging.Logger | None = None) -> bool:  # fmt: skip
    """Log ``message`` (at ``level``, on ``log``) the first time ``key`` is seen in this
    process; returns whether it logged."""
    with _lock:
        if key in _seen:
            return False
        _seen.add(key)
    (log or logger).log(level, message, *args)
    return True


def warned(key: str) -> bool:
    """Whether :func:`warn_once` has already logged ``key`` (a cheap check before work)."""
    return key in _seen


def forget_warnings(prefix: str) -> None:
    """Forget the one-time messages whose key starts with ``prefix`` (tests)."""
    with _lock:
        for key in [k for k in _seen if k.startswith(prefix)]:
            _seen.discard(key)


def error_type(exc: BaseException) -> str:
    """The fully qualified type name of ``exc`` (``error.type`` semantic convention)."""
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"
