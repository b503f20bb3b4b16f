"""A trajectory held by an async generator the caller broke out of (and still holds, so
nothing has closed it yet) never becomes the parent of the caller's next trajectory."""

from __future__ import annotations

import asyncio

from otel_rollout import attributes as A


def test_the_next_trajectory_is_not_nested_under_one_still_held_by_a_generator(rollout_env):
    async def rollouts():
        async with rollout_env.tracer.trajectory("abandoned") as t:
            async with t.generate():
                pass
            yield 1
            yield 2

    async def main():
        agen = rollouts()
        async for _ in agen:
            break  # agen is still alive: its trajectory is open, its context current
        async with rollout_env.tracer.trajectory("next") as t, t.env_step():
            pass
        await agen.aclose()

    asyncio.run(main())
    roots = {s.attributes[A.TRAJECTORY_ID]: s for s in rollout_env.roots()}
    assert set(roots) == {"abandoned", "next"}
    assert roots["next"].parent is None
    assert roots["next"].context.trace_id != roots["abandoned"].context.trace_id
    (step,) = rollout_env.spans(A.SPAN_ENV_STEP)
    assert step.parent.span_id == roots["next"].context.span_id


def test_a_trajectory_inside_a_nested_batch_keeps_the_batch_as_parent(rollout_env):
    tracer = rollout_env.tracer
    with tracer.batch(step=1, nest=True), tracer.trajectory("outer"), tracer.trajectory("inner"):
        pass
    (batch,) = rollout_env.spans(A.SPAN_BATCH)
    roots = {s.attributes[A.TRAJECTORY_ID]: s for s in rollout_env.roots()}
    assert roots["inner"].parent.span_id == batch.context.span_id
    assert roots["outer"].parent.span_id == batch.context.span_id
