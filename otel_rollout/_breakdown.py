"""Where older versions kept :class:`~otel_rollout.Breakdown`: pickles made by them (a Ray
worker running an older otel-rollout) name ``otel_rollout._breakdown._rebuild``, so that
name stays importable. The type lives in :mod:`otel_rollout._accounting.breakdown`."""

from otel_rollout._accounting.breakdown import Breakdown, _rebuild

__all__ = ["Breakdown", "_rebuild"]
