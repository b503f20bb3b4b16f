"""SkyRL's steps and their phases from its own timers (docs/skyrl.md): every
``skyrl.train.utils.utils.Timer`` with an ``update_dict`` (``all_timings``, logged as
``timing/<message>``), wrapped on the class; the trainers' ``train()``, whose step is
their ``global_step``, ended by ``Tracking.log(..., step=n, commit=True)``."""

from __future__ import annotations

import importlib
import weakref
from typing import Any

from otel_rollout.instrumentation import Patches
from otel_rollout.integrations._trainer_steps import TimedBlock, log_wrapper, run_wrapper

TIMER_MODULE = "skyrl.train.utils.utils"
#: (module, class) of the trainers whose ``train()`` runs steps.
TRAINERS = (
    ("skyrl.train.trainer", "RayPPOTrainer"),
    ("skyrl.train.fully_async_trainer", "FullyAsyncRayPPOTrainer"),
)
TRACKING_MODULE = "skyrl.train.utils.tracking"

# the open block of each running Timer (Timers are plain objects, used once each)
_BLOCKS: weakref.WeakKeyDictionary[Any, TimedBlock] = weakref.WeakKeyDictionary()


def _begin(timer: Any) -> None:
    block = TimedBlock.begin(getattr(timer, "message", None), getattr(timer, "update_dict", None))
    if block is not None:
        _BLOCKS[timer] = block


def _end(timer: Any, args: tuple) -> None:
    block = _BLOCKS.pop(timer, None)
    if block is not None:
        block.end(args[1] if len(args) > 1 else None)


def timer_enter(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    _begin(instance)  # __aenter__ too: before its coroutine runs
    return wrapped(*args, **kwargs)


def timer_exit(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    try:
        return wrapped(*args, **kwargs)
    finally:
        _end(instance, args)


async def timer_aexit(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    try:
        return await wrapped(*args, **kwargs)
    finally:
        _end(instance, args)


def _committed_step(args: tuple, kwargs: dict) -> Any:
    """``Tracking.log(data, step, commit=False)``: the step a committing record ends."""
    if kwargs.get("commit", args[2] if len(args) > 2 else False):
        return kwargs.get("step", args[1] if len(args) > 1 else None)
    return None


def patch_steps(patches: Patches, tracer: Any) -> list[str]:
    """Wrap SkyRL's timer, trainers and tracker; the modules missing here."""
    try:
        timer = importlib.import_module(TIMER_MODULE).Timer
    except Exception:
        return [TIMER_MODULE]
    for name, wrapper in (("__enter__", timer_enter), ("__exit__", timer_exit),
                          ("__aenter__", timer_enter), ("__aexit__", timer_aexit)):  # fmt: skip
        patches.wrap(timer, name, wrapper)
    missing: list[str] = []
    train = run_wrapper(tracer, "skyrl", "global_step")
    for module_name, class_name in TRAINERS:
        try:
            cls = getattr(importlib.import_module(module_name), class_name)
        except Exception:  # the trainer's own dependencies (ray, torch...) are missing
            missing.append(module_name)
            continue
        if "train" in cls.__dict__:  # on each class: FullyAsyncRayPPOTrainer overrides it
            patches.wrap(cls, "train", train)
    try:
        tracking = importlib.import_module(TRACKING_MODULE).Tracking
        patches.wrap(tracking, "log", log_wrapper(_committed_step))
    except Exception:
        missing.append(TRACKING_MODULE)
    return missing
