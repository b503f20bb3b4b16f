"""Past the span attribute limit (``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT``, 128 by default) the
SDK evicts the oldest attributes; otel-rollout's own survive, so the online breakdown and
``otel-rollout report`` still know every trajectory, its env class and its phases, and
the user is told once, with a count, instead of once per attribute."""

from __future__ import annotations

import logging

import pytest
from _otel_env import clean_otel_env

from otel_rollout import configure
from otel_rollout._base.errors import forget_warnings
from otel_rollout.report import read_sources


@pytest.mark.parametrize(
    ("limit", "user_attributes"), [(None, 200), (16, 5), (4, 2), (None, 10_000)]
)
def test_own_attributes_survive_the_span_attribute_limit(
    tmp_path, monkeypatch, caplog, limit, user_attributes
):
    clean_otel_env(monkeypatch)
    forget_warnings("attribute-limit")  # logged once per process: once per case here
    if limit is not None:
        monkeypatch.setenv("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", str(limit))
    caplog.set_level(logging.WARNING)
    rollout = configure(local=True, output_dir=tmp_path)
    user = {f"user.{j}": j for j in range(user_attributes)}
    online = []
    with rollout.tracer.batch(step=3):
        for i in range(4):
            with rollout.tracer.trajectory(f"t{i}", env="gsm8k", attributes=user) as t:
                t.span.set_attributes({f"late.{j}": j for j in range(user_attributes)})
                with t.generate() as g:
                    g.span.set_attributes(user)
                with t.env_step() as step:
                    step.span.set_attributes(user)
            online.append(t.breakdown)
    assert rollout.shutdown()
    assert [b.env_class for b in online] == ["gsm8k"] * 4
    res = read_sources([str(tmp_path / "traces-*.jsonl")], warn=lambda m: None)
    found = sorted(res.trajectories, key=lambda t: t.breakdown.trajectory_id)
    assert [t.breakdown.trajectory_id for t in found] == [f"t{i}" for i in range(4)]
    if limit is None or limit >= 4:
        assert all(t.breakdown.env_class == "gsm8k" for t in found)
    assert all(t.breakdown.turns == 1 for t in found)  # the generate span is still llm
    records = [r.getMessage() for r in caplog.records]
    assert not [m for m in records if m.startswith("Attributes dict is full")]
    ours = [m for m in records if "past the span attribute limit" in m]
    assert len(ours) == 1 and "dropped" in ours[0]
