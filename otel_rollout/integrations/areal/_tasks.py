"""AReaL's tasks, batches and async health (docs/areal.md): ``submit_task_input`` notes a
task's workflow and batch, ``AsyncTaskRunner.submit`` runs it with the task current
(:data:`TASK`), ``register_session`` opens an episode and ``mark_finalized`` ends them;
``wait_results`` hands a step its ``consumed`` episodes and the ``dropped`` since."""

from __future__ import annotations

import contextlib
import threading
from collections import OrderedDict
from typing import Any

from opentelemetry.instrumentation.utils import is_instrumentation_enabled

from otel_rollout import RolloutTracer, current_batch, current_step
from otel_rollout.instrumentation import internal_error
from otel_rollout.integrations.areal._state import TASK, Task

#: On the ``batch`` span of a ``rollout_batch`` / ``prepare_batch``: AReaL's concurrency
#: (``max_concurrent_rollouts`` over the data-parallel size) and the call.
CONCURRENCY, CALL = "areal.max_concurrent_rollouts", "areal.call"
#: Submitted tasks remembered until they start, at most (the oldest go first).
MAX_PENDING = 65_536


class Submissions:
    """What the trainer's thread knew when it submitted each task (by the executor's
    runner and task id, until the task starts); none for a suppressed submission."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_key: dict[tuple[int, Any], dict[str, Any]] = {}

    def note(self, runner: Any, task_input: Any, engine: Any) -> None:
        workflow: Any = getattr(task_input, "workflow", None)
        if (
            type(workflow).__name__ == "GroupedRolloutWorkflow"
            and getattr(workflow, "workflow", None) is not None
        ):
            workflow = workflow.workflow  # the group's members' class
        model = getattr(getattr(engine, "config", None), "tokenizer_path", None)
        info = {
            "env": type(workflow).__name__,
            "model": model if isinstance(model, str) and model else None,
            "is_eval": bool(getattr(task_input, "is_eval", False)),
            "version": getattr(engine, "get_version", None),
            "batch": current_batch(),
        }
        with self._lock:
            self._by_key[(id(runner), task_input.task_id)] = info
            while len(self._by_key) > MAX_PENDING:  # tasks that never ran (a destroyed engine)
                del self._by_key[next(iter(self._by_key))]

    def take(self, runner: Any, task_id: Any) -> dict[str, Any] | None:
        with self._lock:
            return self._by_key.pop((id(runner), task_id), None)

    def clear(self) -> None:
        with self._lock:
            self._by_key.clear()


def submit_wrapper(subs: Submissions) -> Any:
    """``BatchTaskDispatcher.submit_task_input(task_input)``, in the trainer's thread."""

    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        try:
            engine = getattr(getattr(instance, "staleness_manager", None), "version_provider", None)
            subs.note(instance.runner, args[0] if args else kwargs.get("task_input"), engine)
        except Exception as exc:
            internal_error("areal submit", exc)
        return wrapped(*args, **kwargs)

    return wrapper


def runner_submit_wrapper(tracer: RolloutTracer, subs: Submissions, ledger: Ledger) -> Any:
    """``AsyncTaskRunner.submit(async_fn, *args, task_id, **kwargs)``: the executor's task,
    run with the task current (so an engine initialized before ``instrument()`` is
    traced too)."""

    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if not args or "task_id" not in kwargs:
            return wrapped(*args, **kwargs)
        fn, task_id = args[0], kwargs["task_id"]

        def done(ep: Any, status: Any, reason: Any) -> None:
            ledger.finished(instance, task_id, ep.traj, status, reason)

        async def run(*a: Any, **kw: Any) -> Any:
            task = None
            try:
                info = subs.take(instance, task_id)
                if info is not None:
                    task = Task(tracer, task_id, info, info.pop("batch"), done)
            except Exception as exc:
                internal_error("areal task", exc)
            if task is None:
                return await fn(*a, **kw)
            token = TASK.set(task)
            try:
                result = await fn(*a, **kw)
            except BaseException as exc:
                task.close(None, None, exc)
                raise
            finally:
                with contextlib.suppress(ValueError):
                    TASK.reset(token)
            task.close(None, None)
            return result

        return wrapped(run, *args[1:], **kwargs)

    return wrapper


def register_session_wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``perf_tracer.register_session(task_id)``: AReaL starts a session (an episode)."""
    session_id = wrapped(*args, **kwargs)
    task = TASK.get()
    if task is not None:
        try:
            task.open_episode(session_id)
        except Exception as exc:
            internal_error("areal session", exc)
    return session_id


def session_event_wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
    """``trace_session_event(method, session_id=None, task_id=None, **payload)``: on
    ``mark_finalized`` the task's episodes end with AReaL's status and reason."""
    result = wrapped(*args, **kwargs)
    method = args[0] if args else kwargs.get("method")
    task = TASK.get()
    if method == "mark_finalized" and task is not None:
        try:
            task_id = kwargs.get("task_id", args[2] if len(args) > 2 else None)
            if task_id is None or task_id == task.task_id:
                task.close(kwargs.get("status"), kwargs.get("reason"))
        except Exception as exc:
            internal_error("areal finalize", exc)
    return result


def batch_wrapper(tracer: RolloutTracer, call: str) -> Any:
    """``WorkflowExecutor.rollout_batch`` / ``prepare_batch``: a batch of its own unless
    the caller has one open."""

    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        if current_batch() is not None or not is_instrumentation_enabled():
            return wrapped(*args, **kwargs)
        attrs: dict[str, Any] = {CALL: call}
        c = None
        with contextlib.suppress(Exception):
            value = instance.staleness_manager.max_concurrent_rollouts
            if isinstance(value, int) and value > 0:
                c = attrs[CONCURRENCY] = value
        try:
            scope = tracer.batch(attributes=attrs, concurrency=c)
        except Exception as exc:
            internal_error("areal batch", exc)
            return wrapped(*args, **kwargs)
        with scope:
            return wrapped(*args, **kwargs)

    return wrapper


#: AReaL's reason for not accepting an episode, and the step's drop reason for it.
DROP_REASONS = {"rejected": "filtered", "returned_none": "filtered"}
#: Finished episodes kept for a step to take, at most (the oldest go first).
MAX_WAITING = 65_536


class Ledger:
    """Finished episodes, by the executor's runner and task, until a step takes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._done: OrderedDict[tuple[int, Any], list[tuple[Any, Any, Any]]] = OrderedDict()

    def finished(self, runner: Any, task_id: Any, traj: Any, status: Any, reason: Any) -> None:
        with self._lock:
            self._done.setdefault((id(runner), task_id), []).append((traj, status, reason))
            while len(self._done) > MAX_WAITING:
                self._done.popitem(last=False)

    def take(self, runner: Any, task_ids: list[Any]) -> tuple[list[Any], dict[str, list[Any]]]:
        """The episodes of ``task_ids`` (kept), and every episode of this runner that
        AReaL did not accept (dropped, by reason)."""
        rid = id(runner)
        dropped: dict[str, list[Any]] = {}
        with self._lock:
            kept = [e[0] for t in task_ids for e in self._done.pop((rid, t), ())]
            for key in [k for k in self._done if k[0] == rid]:
                rest = []
                for traj, status, reason in self._done[key]:
                    if status in ("accepted", None):
                        rest.append((traj, status, reason))
                    else:
                        why = DROP_REASONS.get(str(reason), str(reason or status))
                        dropped.setdefault(why, []).append(traj)
                if rest:
                    self._done[key] = rest
                else:
                    del self._done[key]
        return kept, dropped

    def clear(self) -> None:
        with self._lock:
            self._done.clear()


def wait_results_wrapper(ledger: Ledger) -> Any:
    """``BatchTaskDispatcher.wait_results(count, ...)``: the trainer takes results."""

    def wrapper(wrapped: Any, instance: Any, args: tuple, kwargs: dict) -> Any:
        results = wrapped(*args, **kwargs)
        step = current_step()
        if step is None:
            return results
        try:
            ids = [r.task_id for r in results if r is not None and hasattr(r, "task_id")]
            kept, dropped = ledger.take(instance.runner, ids)
            engine = getattr(instance.staleness_manager, "version_provider", None)
            version = int(engine.get_version()) if engine is not None else None
            if kept:
                step.consumed(kept, version=version)
            for reason, trajs in dropped.items():
                step.dropped(trajs, reason, version=version)
        except Exception as exc:
            internal_error("areal step health", exc)
        return results

    return wrapper
