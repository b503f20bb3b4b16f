"""Integrations with RL trainers and inference engines (optional extras): one package
each, built on :mod:`otel_rollout` and :mod:`otel_rollout.instrumentation` only."""
