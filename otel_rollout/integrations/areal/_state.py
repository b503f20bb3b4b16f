"""The AReaL task running in this context (one ``WorkflowExecutor`` task, run as an
asyncio task of its own) and its episodes (trajectories; a group's run in tasks of their
own, so each context's episode is its own)."""

from __future__ import annotations

import contextvars
import threading
from typing import Any

from otel_rollout import Generation, RolloutTracer
from otel_rollout import TrajectoryHandle as Trajectory
from otel_rollout import attributes as A
from otel_rollout.instrumentation import attach_batch, detach_batch, internal_error

#: Root attributes: AReaL's task and session ids, its final status and reason, the
#: workflow class, whether the task is an evaluation, and the newest weight version in
#: the episode's tokens (``rollout.policy.version`` is the oldest).
TASK_ID, SESSION_ID = "areal.task.id", "areal.session.id"
STATUS, REASON = "areal.session.status", "areal.session.reason"
WORKFLOW, EVAL, VERSION_MAX = "areal.workflow", "areal.eval", "areal.version.max"
#: AReaL's final status and ours (a rejected episode ran to its end: it is ``ok``).
_STATUS = {"accepted": A.STATUS_OK, "rejected": A.STATUS_OK, "dropped": A.STATUS_OK,
           "failed": A.STATUS_ERROR}  # fmt: skip

TASK: contextvars.ContextVar[Task | None] = contextvars.ContextVar(
    "otel_rollout_areal_task", default=None
)
#: The episode current in this context (never reset: the context ends with the task).
EPISODE: contextvars.ContextVar[Episode | None] = contextvars.ContextVar(
    "otel_rollout_areal_episode", default=None
)
#: The ``generate`` phase open here, which the model call inside records into.
GEN: contextvars.ContextVar[Generation | None] = contextvars.ContextVar(
    "otel_rollout_areal_gen", default=None
)


class Episode:
    """One trajectory: opened where AReaL registers a session (or at a first model call),
    ended when AReaL finalizes the task."""

    __slots__ = ("_scope", "ended", "session_id", "task", "traj", "versions")

    def __init__(self, task: Task, scope: Any, traj: Trajectory, session_id: Any) -> None:
        self.task, self._scope, self.traj, self.session_id = task, scope, traj, session_id
        self.versions: tuple[int, int] | None = None  # oldest, newest weight version seen
        self.ended = False

    def saw_versions(self, versions: Any) -> None:
        """The weight versions of a response's tokens (``ModelResponse.output_versions``)."""
        try:
            got = [v for v in map(int, versions or ()) if v >= 0]
            if got:
                lo, hi = self.versions or (min(got), max(got))
                self.versions = lo, hi = min(lo, *got), max(hi, *got)
                self.traj.set_policy_version(lo)
                self.traj.set_attribute(VERSION_MAX, hi)
        except Exception as exc:
            internal_error("areal versions", exc)

    def end(self, status: Any, reason: Any, exc: BaseException | None = None) -> None:
        if self.ended:
            return
        self.ended = True
        traj = self.traj
        if status is not None:
            traj.set_attribute(STATUS, str(status))
            if str(status) in _STATUS:
                traj.set_status(_STATUS[str(status)])
        if reason is not None:
            traj.set_attribute(REASON, str(reason))
        self._scope.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)
        if self.task.on_finish is not None:
            try:
                self.task.on_finish(self, status, reason)
            except Exception as err:
                internal_error("areal episode finished", err)


class Task:
    """One executor task: its episodes, ended together when AReaL finalizes it. ``info``:
    ``env``, ``model``, ``is_eval``, ``version`` (the engine's, a callable)."""

    __slots__ = ("_lock", "batch", "episodes", "info", "on_finish", "task_id", "tracer")

    def __init__(
        self, tracer: RolloutTracer, task_id: Any, info: dict[str, Any], batch: Any = None,
        on_finish: Any = None,
    ) -> None:  # fmt: skip
        self.tracer, self.task_id, self.info = tracer, task_id, info
        self.batch, self.on_finish = batch, on_finish
        self.episodes: list[Episode] = []
        self._lock = threading.Lock()

    def episode_here(self) -> Episode:
        """The episode current in this context, opened now if there is none."""
        ep = EPISODE.get()
        if ep is not None and ep.task is self and not ep.ended:
            return ep
        return self.open_episode(None)

    def open_episode(self, session_id: Any) -> Episode:
        """A new trajectory root (linked to the task's batch), current in this context;
        an episode a model call opened here takes the session instead."""
        ep = EPISODE.get()
        if ep is not None and ep.task is self and not ep.ended and ep.session_id is None:
            if session_id is not None:
                ep.session_id = session_id
                ep.traj.set_attribute(SESSION_ID, session_id)
            return ep
        info = self.info
        attrs: dict[str, Any] = {TASK_ID: self.task_id, WORKFLOW: info.get("env")}
        if session_id is not None:
            attrs[SESSION_ID] = session_id
        if info.get("is_eval"):
            attrs[EVAL] = True
        with self._lock:
            index = len(self.episodes)
        scope = self.tracer.trajectory(
            instance_id=self.task_id, repetition_id=index, group_id=self.task_id,
            env=info.get("env"), model=info.get("model"), attributes=attrs,
        )  # fmt: skip
        token = attach_batch(self.batch)  # the submitter's batch, or none
        try:
            traj = scope.__enter__()
        finally:
            detach_batch(token)
        ep = Episode(self, scope, traj, session_id)
        try:
            if info.get("version") is not None:
                traj.set_policy_version(int(info["version"]()))
        except Exception as exc:
            internal_error("areal engine version", exc)
        with self._lock:
            self.episodes.append(ep)
        EPISODE.set(ep)
        return ep

    def close(self, status: Any, reason: Any, exc: BaseException | None = None) -> None:
        """End the open episodes: AReaL's ``mark_finalized`` (its status), or the task's
        end (those it did not finalize: the task raised or was cancelled)."""
        with self._lock:
            open_ = [ep for ep in self.episodes if not ep.ended]
        for ep in reversed(open_):
            ep.end(status, reason, exc)
