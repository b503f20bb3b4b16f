"""Carrying the trajectory's context into thread pools, which do not inherit it."""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any, TypeVar

T = TypeVar("T")


def bind_context(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Callable[[], T]:
    """``fn(*args, **kwargs)`` as a no-argument callable that runs in the caller's context.

    ``loop.run_in_executor`` and ``Executor.submit`` do not copy contextvars, so spans
    opened in the worker thread would start new traces; bind first.
    """
    ctx = contextvars.copy_context()
    return functools.partial(ctx.run, fn, *args, **kwargs)


async def run_in_executor(executor: Executor | None, fn: Callable[..., T], /, *args: Any) -> T:
    """``loop.run_in_executor(executor, fn, *args)`` that keeps the trajectory's context."""
    loop = asyncio.get_running_loop()
    return await loop.run_in_executor(executor, bind_context(fn, *args))
